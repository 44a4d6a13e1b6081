"""A cleaning pass over many dirty partitions: one Spark task per core against one per partition.

    python bench/cleaning_scale.py                 # 1,000 partitions, 20 records each
    python bench/cleaning_scale.py --partitions 200 --records 50

Builds a lake without Kafka through the product's own ingest path (one topic, every partition
holding ``--records`` records of a few keys, so every partition is dirty), then times one
forced cleaning pass (``compactor clean --force``'s) twice on fresh copies of that lake: with
the pass's partitions shared out one task per core (the product), and with one task per
partition (the baseline, the product before). Prints both times and their ratio; never asserts.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compactor.cleaner import maintenance  # noqa: E402
from compactor.cleaner.maintenance import LogMaintenance  # noqa: E402
from streaming.session import build_session  # noqa: E402
from tests.lake import append, offline_config  # noqa: E402

NOW = 1_700_000_000_000


def build(lake: Path, partitions: int, records: int) -> None:
    config = offline_config(str(lake), "t", cleanup_policy="compact")
    for p in range(partitions):
        append(config, "t", p, [(o, b"k%d" % (o % 4), b"v" * 100, NOW) for o in range(records)],
               NOW)


def one_pass(lake: Path, per_partition: bool, spark: object) -> tuple[float, int]:
    config = offline_config(str(lake), "t", cleanup_policy="compact")
    original = maintenance.balanced_groups
    if per_partition:
        maintenance.balanced_groups = lambda sizes, _n: [[i] for i in range(len(sizes))]
    try:
        started = time.monotonic()
        report = LogMaintenance(spark, config).run_pass(force=True, now_ms=NOW + 10**9)
        return time.monotonic() - started, len(report.cleaned)
    finally:
        maintenance.balanced_groups = original


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cleaning-scale-"))
    source = work / "source"
    started = time.monotonic()
    build(source, args.partitions, args.records)
    print(f"built {args.partitions} dirty partitions in {time.monotonic() - started:.0f}s")
    spark = build_session({"spark.master": "local[2]", "spark.ui.enabled": "false"})
    one_pass(Path(shutil.copytree(source, work / "warm")), False, spark)  # workers forked
    times = {}
    for label, per_partition in (("one task per core", False), ("one task per partition", True)):
        copy = Path(shutil.copytree(source, work / label.replace(" ", "-")))
        seconds, cleaned = one_pass(copy, per_partition, spark)
        times[label] = seconds
        print(f"{label:<24} {seconds:7.2f} s  ({cleaned} partitions cleaned)")
    ratio = times["one task per partition"] / times["one task per core"]
    print(f"one task per core is {ratio:.1f}x faster; work dir {work}")
    spark.stop()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
