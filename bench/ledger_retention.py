"""What the erasure ledger's retention saves at start, and what a prune costs under the lock.

Without a retention the ledger keeps every erasure a topic ever carried, and ``compactor run``
reads it whole at start. ``python bench/ledger_retention.py`` builds ``--days`` days of
history (``--per-day`` tombstones a day, each finished within a second by the log and the
table, whose done events come once a second; one file a day, as the ledger's compaction
leaves it), then measures:

- the baseline: the start-up read (a fresh ``ErasureLedger``'s backlog) of the whole history;
- the first prune at the default retention (7 days), which removes everything older;
- the start-up read of what the prune left;
- a prune one check interval later (7 hours of new history, 7 hours more past the cutoff):
  what a running mirror pays each time, under the commit lock its micro-batches wait for.

It prints seconds, rows and files, and the ratio of the two start-up reads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compactor.config import build_config, with_topic_configs  # noqa: E402
from compactor.erasure.ledger import LEDGER_PROPERTIES, LEDGER_SCHEMA, ErasureLedger  # noqa: E402
from compactor.erasure.ledger_retention import check_every_ms  # noqa: E402
from compactor.positions import LEDGER  # noqa: E402

TOPIC = "t"
DAY_MS = 86_400_000


def _span(first: int, start_ms: int, ms: int, per_day: int) -> tuple[pa.Table, int]:
    """The events of ``ms`` of history from ``start_ms``: tombstones (every tenth record of
    the log, digests random as SHA-256's are) and each target's done event every second up to
    the last offset before it; and the next free offset."""
    n = per_day * ms // DAY_MS
    offsets = first + 10 * np.arange(n, dtype=np.int64)
    stamps = start_ms + (np.arange(n, dtype=np.int64) * ms) // max(n, 1)
    seconds = ms // 1000
    at = start_ms + 1000 * np.arange(1, seconds + 1, dtype=np.int64)
    covered = np.searchsorted(stamps, at, side="left")  # tombstones stamped before each tick
    ups = np.where(covered > 0, first + 10 * (covered - 1), first - 1)
    digests = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), n, [None, pa.py_buffer(np.random.bytes(16 * n))]).cast(pa.binary())
    k = 2 * seconds
    table = pa.table({
        "event": pa.array(["tombstone"] * n + ["done"] * k),
        "partition": pa.array(np.zeros(n + k, dtype=np.int32)),
        "offset": pa.array(np.concatenate([offsets, ups, ups])),
        "keyDigest": pa.concat_arrays([digests, pa.nulls(k, pa.binary())]),
        "tombstoneTimeMs": pa.concat_arrays([pa.array(stamps), pa.nulls(k, pa.int64())]),
        "deadlineMs": pa.concat_arrays([pa.array(stamps + 60_000), pa.nulls(k, pa.int64())]),
        "target": pa.array([None] * n + ["log"] * seconds + ["table"] * seconds, pa.string()),
        "atMs": pa.array(np.concatenate([stamps, at, at])),
    }, schema=LEDGER_SCHEMA)
    return table, first + 10 * n


def _append(path: str, events: pa.Table, scanned: int) -> None:
    write_deltalake(path, events, mode="append", configuration=LEDGER_PROPERTIES,
                    commit_properties=CommitProperties(
                        app_transactions=[LEDGER.moved_to(scanned, 0)]))


def _startup(config: object, now: int) -> float:
    """Seconds of the start-up read (best of three)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        ErasureLedger(config).backlog(TOPIC, now_ms=now)  # type: ignore[arg-type]
        times.append(time.perf_counter() - t0)
    return min(times)


def _shape(path: str) -> str:
    table = DeltaTable(path)
    rows = table.to_pyarrow_dataset().count_rows()
    size = sum(pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    return f"{rows:,} events in {len(table.file_uris())} files, {size / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=350_000,
                        help="tombstones a day (4 a second)")
    args = parser.parse_args()

    lake = tempfile.mkdtemp(prefix="ledger-retention-")
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": TOPIC, "lake.path": lake,
        "cleanup.policy": "compact", "max.compaction.lag.ms": "60000"}), {})
    ledger = ErasureLedger(config)
    path = ledger.path(TOPIC)
    retention = config.topic(TOPIC).erasure_ledger_retention_ms
    now = int(time.time() * 1000)
    start = now - args.days * DAY_MS
    offset = 0
    t0 = time.perf_counter()
    for day in range(args.days):
        events, offset = _span(offset, start + day * DAY_MS, DAY_MS, args.per_day)
        _append(path, events, offset - 10)
    print(f"{args.days} days of history built in {time.perf_counter() - t0:.0f}s: "
          f"{_shape(path)}", flush=True)

    before = _startup(config, now)
    t0 = time.perf_counter()
    removed = ledger.prune(TOPIC, now_ms=now)
    first_prune = time.perf_counter() - t0
    print(f"first prune at a {retention / DAY_MS:g}-day retention: {removed:,} erasures removed "
          f"in {first_prune:.2f}s; left {_shape(path)}", flush=True)
    after = _startup(config, now)

    every = check_every_ms(retention)
    prunes = []
    for i in range(1, 4):  # three checks of a running mirror, each after 7 h of new history
        events, offset = _span(offset, now + (i - 1) * every, every, args.per_day)
        _append(path, events, offset - 10)
        t0 = time.perf_counter()
        removed = ledger.prune(TOPIC, now_ms=now + i * every)
        prunes.append(time.perf_counter() - t0)
        print(f"prune {i}, {every / 3_600_000:g} h later: {removed:,} erasures removed in "
              f"{prunes[-1]:.2f}s; left {_shape(path)}", flush=True)

    print(f"\n{'':<58}{'this':>9}{'baseline':>10}{'ratio':>8}")
    print(f"{'start-up read of the ledger, s (7-day retention vs none)':<58}{after:>9.2f}"
          f"{before:>10.2f}{after / before:>7.2f}x")
    label = "a running mirror's prune, s (median of 3, under the lock)"
    print(f"{label:<58}{statistics.median(prunes):>9.2f}")


if __name__ == "__main__":
    main()
