"""What consolidating the active segment rewrites as it grows: the product's rule against the
previous one, which merged the active segment's whole run of small files every time.

    python bench/consolidation.py                   # 1,500 micro-batches of 2 records
    python bench/consolidation.py --batches 3000 --records 20

Builds a lake without Kafka through the product's own ingest path (one topic, one partition,
``cleanup.policy=delete``, a segment that does not roll), appends ``--batches`` micro-batch
files of ``--records`` records each and runs a cleaning pass after every one, as a running
mirror's passes find them. Per rule it prints the record bytes the passes rewrote against the
record bytes appended (the write amplification), the most files the active segment held,
and the median pass time over the first and the last ``--window`` batches (a rule whose work
follows the segment's history slows down as it grows). Never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deltalake import DeltaTable  # noqa: E402

from compactor.cleaner import consolidation  # noqa: E402
from compactor.cleaner.maintenance import LogMaintenance  # noqa: E402
from compactor.lake.layout import topic_paths  # noqa: E402
from compactor.lake.segments import DataFile  # noqa: E402
from tests.lake import append, offline_config  # noqa: E402

NOW = 1_700_000_000_000


def whole_run(run: Sequence[DataFile]) -> tuple[DataFile, ...]:
    """The previous rule: the whole open run once it holds ACTIVE_MERGE_FILES files."""
    return tuple(run) if len(run) >= consolidation.ACTIVE_MERGE_FILES else ()


def one_rule(work: Path, name: str, batches: int, records: int,
             window: int) -> tuple[int, int, int, float, float]:
    """(record bytes appended, record bytes rewritten, most files, median first and last
    pass seconds) of ``batches`` micro-batches, a pass after each."""
    config = offline_config(str(work / name), "t", cleanup_policy="delete",
                            segment_ms=10**12, segment_bytes=2**40)
    log = topic_paths(str(work / name), "t").log
    maintenance = LogMaintenance(None, config)
    appended = rewritten = most = 0
    seconds: list[float] = []
    for b in range(batches):
        rows: list[tuple[int, bytes | None, bytes | None, int]] = [
            (b * records + i, b"k%d" % i, b"v" * 100, NOW + b) for i in range(records)]
        for result in append(config, "t", 0, rows, now_ms=NOW + b):
            appended += sum(f.record_bytes for f in result.files)
        started = time.monotonic()
        report = maintenance.run_pass(now_ms=NOW + b)
        seconds.append(time.monotonic() - started)
        rewritten += sum(o.result.stats.record_bytes_written for o in report.cleaned
                         if o.result is not None)
        if b % 25 == 0 or b == batches - 1:
            most = max(most, len(DeltaTable(log).file_uris()))
    return (appended, rewritten, most, statistics.median(seconds[:window]),
            statistics.median(seconds[-window:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--records", type=int, default=2, help="records a micro-batch")
    ap.add_argument("--window", type=int, default=100, help="batches of the first and last")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="consolidation-"))
    rules = [("product", consolidation._newest_run), ("whole run (previous)", whole_run)]
    print(f"{args.batches} micro-batches of {args.records} records, a pass after each; "
          f"work dir {work}")
    print(f"{'rule':<22} {'appended':>10} {'rewritten':>11} {'amplif.':>8} {'most files':>10} "
          f"{'first pass':>10} {'last pass':>10}")
    original = consolidation._newest_run
    try:
        for name, rule in rules:
            consolidation._newest_run = rule
            appended, rewritten, most, first, last = one_rule(
                work, name.split()[0], args.batches, args.records, args.window)
            print(f"{name:<22} {appended:>10,} {rewritten:>11,} {rewritten / appended:>7.1f}x "
                  f"{most:>10} {first * 1000:>8.1f}ms {last * 1000:>8.1f}ms", flush=True)
    finally:
        consolidation._newest_run = original


if __name__ == "__main__":
    main()
