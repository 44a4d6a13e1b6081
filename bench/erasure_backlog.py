"""What a refresh of the erasure figures costs on a ledger with a long history.

A running mirror refreshes its metrics (the erasure backlog among them) after every cleaning
pass. The ledger keeps every tombstone ever mirrored, a few hundred thousand rows a day on a
busy topic. ``python bench/erasure_backlog.py`` builds a ledger of ``--days`` days of history
(``--per-day`` tombstones a day, each finished by the log and the table, plus the done events
of a 1 s trigger, compacted as the maintenance pass keeps it), then appends one micro-batch's
events at a time and measures, per refresh:

- the baseline: a full read of the ledger, as every refresh did before the backlog was
  followed (a fresh ``ErasureLedger``, which is also what a one-off ``compactor status`` pays);
- the product: one ``ErasureLedger`` kept across refreshes (``compactor.erasure.backlog``),
  which reads only the commits since its last refresh.

It prints the medians, their ratio, and the process's resident memory after each part.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import rss_mb  # noqa: E402

from compactor.config import build_config, with_topic_configs  # noqa: E402
from compactor.erasure.ledger import LEDGER_PROPERTIES, LEDGER_SCHEMA, ErasureLedger  # noqa: E402
from compactor.positions import LEDGER  # noqa: E402

TOPIC = "t"


def _events(first: int, tombstones: int, done_events: int, at_ms: int) -> pa.Table:
    """``tombstones`` tombstones from offset ``first`` on partition 0 (every tenth record of
    the log is one), and ``done_events`` done events of each target that finish them."""
    offsets = [first + 10 * i for i in range(tombstones)]
    last = offsets[-1] if offsets else first
    n = tombstones + 2 * done_events
    ups = [first + (last - first) * (i + 1) // done_events for i in range(done_events)]
    rows = {
        "event": ["tombstone"] * tombstones + ["done"] * (2 * done_events),
        "partition": [0] * n,
        "offset": offsets + ups + ups,
        "keyDigest": [b"\x00" * 16] * tombstones + [None] * (2 * done_events),
        "tombstoneTimeMs": [at_ms] * tombstones + [None] * (2 * done_events),
        "deadlineMs": [at_ms + 60_000] * tombstones + [None] * (2 * done_events),
        "target": [None] * tombstones + ["log"] * done_events + ["table"] * done_events,
        "atMs": [at_ms] * n,
    }
    return pa.table(rows, schema=LEDGER_SCHEMA)


def _scanned_to(offset: int) -> CommitProperties:
    """The ledger's scan position moved in the same commit, as ``record_tombstones`` does."""
    return CommitProperties(app_transactions=[LEDGER.moved_to(offset, 0)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--per-day", type=int, default=350_000,
                        help="tombstones a day (4 a second)")
    parser.add_argument("--refreshes", type=int, default=20)
    args = parser.parse_args()

    lake = tempfile.mkdtemp(prefix="erasure-backlog-")
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": TOPIC, "lake.path": lake,
        "cleanup.policy": "compact", "max.compaction.lag.ms": "60000"}), {})
    path = ErasureLedger(config).path(TOPIC)
    tombstones = int(args.days * args.per_day)
    now = int(time.time() * 1000)
    started = time.perf_counter()
    history = _events(0, tombstones, int(args.days * 86_400), now - 86_400_000)
    write_deltalake(path, history, configuration=LEDGER_PROPERTIES,
                    commit_properties=_scanned_to(10 * tombstones))
    print(f"ledger of {history.num_rows:,} events ({tombstones:,} tombstones) built in "
          f"{time.perf_counter() - started:.1f}s at {path}", file=sys.stderr)

    kept = ErasureLedger(config)
    kept.backlog(TOPIC)  # its one full read, at start
    first = 10 * tombstones
    full, followed = [], []
    for i in range(args.refreshes):
        batch = _events(first + 40 * i, 4, 1, now + i)  # a 1 s batch at 4 tombstones a second
        write_deltalake(path, batch, mode="append",
                        commit_properties=_scanned_to(first + 40 * (i + 1)))
        t0 = time.perf_counter()
        want = ErasureLedger(config).backlog(TOPIC, now_ms=now + i)
        full.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        got = kept.backlog(TOPIC, now_ms=now + i)
        followed.append(time.perf_counter() - t0)
        assert got == want, (got, want)
    full_ms = statistics.median(full) * 1000
    followed_ms = statistics.median(followed) * 1000
    print(f"\n{args.days:g} day(s) of history: {history.num_rows:,} ledger events, "
          f"{args.refreshes} refreshes, one micro-batch's events between them")
    print(f"{'refresh of the erasure backlog (median)':<52}{'this':>10}{'baseline':>10}"
          f"{'ratio':>8}")
    print(f"{'followed ledger vs full read, ms':<52}{followed_ms:>10.1f}{full_ms:>10.1f}"
          f"{followed_ms / full_ms:>7.3f}x")
    print(f"{'resident memory at the end, MB':<52}{rss_mb('VmRSS'):>10.0f}")


if __name__ == "__main__":
    main()
