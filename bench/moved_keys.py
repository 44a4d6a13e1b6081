"""What looking for keys that moved partition adds to a latest-value table's catch-up.

    python bench/moved_keys.py                   # 500,000 live keys over 12 partitions
    python bench/moved_keys.py --keys 100000 --partitions 200

Builds a lake without Kafka through the product's own ingest path (one topic, ``--keys`` keys
spread over ``--partitions`` partitions, merged into the table), then appends ``--updates``
records of existing keys, one in ten a tombstone (no key moves), and times the catch-up that
merges them twice on fresh copies of that lake: as the product runs it (reading the table's
rows of the tombstoned keys to find moved ones), and with that step switched off (the
baseline, the product before). A catch-up without tombstones reads nothing more. Prints both
times and their ratio; never asserts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402

from compactor.lake import latest_table  # noqa: E402
from tests.lake import append, offline_config  # noqa: E402

NOW = 1_700_000_000_000


def build(lake: Path, keys: int, partitions: int) -> None:
    config = offline_config(str(lake), "t", cleanup_policy="compact")
    for p in range(partitions):
        mine = range(p, keys, partitions)
        append(config, "t", p, [(o, b"key-%09d" % k, b"v" * 100, NOW)
                                for o, k in enumerate(mine)], NOW)
    latest_table.catch_up(config.lake_path, "t", config.storage)


def updated(lake: Path, keys: int, partitions: int, updates: int) -> float:
    """Append the updates to partition 0 and time the catch-up that merges them."""
    config = offline_config(str(lake), "t", cleanup_policy="compact")
    first = len(range(0, keys, partitions))
    append(config, "t", 0, [(first + i, b"key-%09d" % (i * partitions % keys),
                             None if i % 10 == 0 else b"w" * 100, NOW + 1)
                            for i in range(updates)], NOW)
    started = time.monotonic()
    stats = latest_table.catch_up(config.lake_path, "t", config.storage, erase_moved=True)
    elapsed = time.monotonic() - started
    tombstones = len(range(0, updates, 10))  # the workload is right
    assert (stats.moved_values, stats.updated, stats.deleted) == (
        0, updates - tombstones, tombstones), stats
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--updates", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="moved-keys-"))
    source = work / "source"
    started = time.monotonic()
    build(source, args.keys, args.partitions)
    print(f"lake of {args.keys:,} keys over {args.partitions} partitions built in "
          f"{time.monotonic() - started:.1f} s", flush=True)
    product, baseline = [], []
    original = latest_table.table_rows
    for r in range(args.rounds):
        for label, times in (("product", product), ("baseline", baseline)):
            copy = work / f"{label}-{r}"
            shutil.copytree(source, copy)
            if label == "baseline":  # no rows read: no key can be seen to have moved
                latest_table.table_rows = lambda table, keys, path: original(  # type: ignore
                    table, pa.array([], pa.binary()), path)
            try:
                times.append(updated(copy, args.keys, args.partitions, args.updates))
            finally:
                latest_table.table_rows = original
            shutil.rmtree(copy)
    p, b = statistics.median(product), statistics.median(baseline)
    print(f"catch-up of {args.updates:,} records (a tenth tombstones), median of {args.rounds}: "
          f"{p:.2f} s with the moved-key check, {b:.2f} s without: {p / b:.2f}x")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
