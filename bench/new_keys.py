"""What a latest-value table's catch-up costs when its keys are new, appended or merged.

    python bench/new_keys.py                     # a table of 10,000 keys, 20 rounds
    python bench/new_keys.py --keys 500000 --rounds 5

Builds a lake without Kafka through the product's own ingest path (one topic of
``--partitions`` partitions, ``--keys`` keys merged into the table), then times rounds of
catch-ups of ``--batch`` records each, alternating the product and the baseline (the same
code with the append switched off, so every catch-up is a MERGE, as before):

- new keys only: the product appends them (after reading the table's key column);
- new keys and one key the table holds (after all the rounds above): both MERGE; the product
  reads the keys once in ``MERGES_WITHOUT_LOOKING`` + 1 catch-ups, which is what the append
  costs a topic whose catch-ups always update.

Prints the median seconds and CPU seconds of each and their ratios; never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compactor.lake import latest_table  # noqa: E402
from tests.lake import append, offline_config  # noqa: E402

NOW = 1_700_000_000_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    config = offline_config(tempfile.mkdtemp(prefix="new-keys-"), "t", cleanup_policy="compact")
    ends = [0] * args.partitions
    fresh = 0

    def records(held: bool) -> None:
        nonlocal fresh
        for i in range(args.batch):
            p = i % args.partitions
            key = b"key-%09d" % 0 if held and i == 0 else b"new-%09d" % fresh
            fresh += 1
            append(config, "t", p, [(ends[p], key, b"v" * 100, NOW)], NOW)
            ends[p] += 1

    for p in range(args.partitions):
        mine = range(p, args.keys, args.partitions)
        append(config, "t", p, [(o, b"key-%09d" % k, b"v" * 100, NOW)
                                for o, k in enumerate(mine)], NOW)
        ends[p] = len(mine)
    latest_table.catch_up(config.lake_path, "t", config.storage)
    original = latest_table.appendable
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    # All new-key rounds first: a held key makes the product MERGE its next catch-ups unread.
    for case, held in (("new keys", False), ("one held key", True)):
        for r in range(args.rounds + 2):
            for label in ("product", "baseline"):
                latest_table.appendable = original if label == "product" else (  # type: ignore
                    lambda *_: False)
                records(held)
                wall, cpu = time.perf_counter(), time.process_time()
                latest_table.catch_up(config.lake_path, "t", config.storage)
                if r >= 2:  # the first two rounds warm up
                    times.setdefault((case, label), []).append(
                        (time.perf_counter() - wall, time.process_time() - cpu))
    latest_table.appendable = original
    print(f"table of {args.keys:,} keys over {args.partitions} partitions, {args.batch} records "
          f"a catch-up, {args.rounds} rounds each")
    print(f"{'catch-up':<14}{'product s':>11}{'cpu':>8}{'baseline s':>12}{'cpu':>8}{'ratio':>8}")
    for case in ("new keys", "one held key"):
        prod = [statistics.median(x[i] for x in times[case, "product"]) for i in (0, 1)]
        base = [statistics.median(x[i] for x in times[case, "baseline"]) for i in (0, 1)]
        print(f"{case:<14}{prod[0]:>11.4f}{prod[1]:>8.4f}{base[0]:>12.4f}{base[1]:>8.4f}"
              f"{prod[0] / base[0]:>7.2f}x")


if __name__ == "__main__":
    main()
