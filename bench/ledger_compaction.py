"""What one compaction pass of the erasure ledger costs as the ledger's history grows.

The maintenance pass compacts each topic's erasure ledger once it holds 64 small files (a
micro-batch with tombstones and each done event add one), under the commit lock that the
mirror's own commits wait for. ``python bench/ledger_compaction.py`` builds, for each of
``--days`` days of history at ``--per-second`` tombstones a second, the ledger each way of
compacting would have left, adds 64 micro-batches' files and times one pass:

- the baseline: delta-rs's OPTIMIZE at its default target (100 MB), as passes ran before:
  it rewrites the whole history (kept in one file up to that size) with the new files;
- the product: ``ErasureLedger.compact``, whose target (``COMPACT_TARGET_BYTES``) leaves
  the files of older history alone.

It prints seconds and bytes rewritten per pass, and their ratio.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compactor.config import build_config, with_topic_configs  # noqa: E402
from compactor.erasure import ledger as ledger_module  # noqa: E402
from compactor.erasure.ledger import LEDGER_PROPERTIES, LEDGER_SCHEMA, ErasureLedger  # noqa: E402

TOPIC = "t"
T0 = 1_700_000_000_000


def _tombstones(first: int, n: int) -> pa.Table:
    """``n`` tombstone events from offset ``first``, digests random as SHA-256's are."""
    return pa.table({
        "event": ["tombstone"] * n, "partition": [0] * n,
        "offset": list(range(first, first + n)),
        "keyDigest": [os.urandom(16) for _ in range(n)],
        "tombstoneTimeMs": list(range(T0 + first, T0 + first + n)),
        "deadlineMs": list(range(T0 + first + 60_000, T0 + first + n + 60_000)),
        "target": [None] * n, "atMs": [T0 + first] * n,
    }, schema=LEDGER_SCHEMA)


def _ledger(lake: str, events: int, chunk: int) -> tuple[ErasureLedger, str]:
    """A ledger of ``events`` tombstones in files of ``chunk`` events, then 64 micro-batches'
    files (4 tombstones and a done event each, as a 1 s trigger at 4 a second writes)."""
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": TOPIC, "lake.path": lake,
        "cleanup.policy": "compact", "max.compaction.lag.ms": "60000"}), {})
    ledger = ErasureLedger(config)
    path = ledger.path(TOPIC)
    for first in range(0, events, chunk):
        write_deltalake(path, _tombstones(first, min(chunk, events - first)), mode="append",
                        configuration=LEDGER_PROPERTIES)
    for i in range(ledger_module.COMPACT_AT_FILES // 2):
        write_deltalake(path, _tombstones(events + 4 * i, 4), mode="append")
        ledger.record_done(TOPIC, "log", {0: events + 4 * i - 1}, now_ms=T0 + events + i)
    return ledger, path


def _sizes(path: str) -> dict[str, int]:
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return dict(zip(actions.column("path").to_pylist(),
                    actions.column("size_bytes").to_pylist(), strict=True))


def _pass(path: str, compact: Callable[[], object]) -> tuple[float, int, int]:
    """One compaction pass: its seconds, the bytes of the files it replaced, files after."""
    before = _sizes(path)
    t0 = time.perf_counter()
    compact()
    seconds = time.perf_counter() - t0
    after = _sizes(path)
    assert len(after) < len(before), "the pass compacted nothing"
    return seconds, sum(size for f, size in before.items() if f not in after), len(after)


def _bytes_per_event() -> float:
    lake = tempfile.mkdtemp(prefix="ledger-compaction-")
    try:
        write_deltalake(lake, _tombstones(0, 100_000))
        return sum(_sizes(lake).values()) / 100_000
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", default="1,7", help="days of history, comma-separated")
    parser.add_argument("--per-second", type=float, default=4.0,
                        help="tombstones a second (4: 345,600 a day)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    target = ledger_module.COMPACT_TARGET_BYTES
    # The product's history as its passes leave it: files a little short of the target.
    per_file = int(0.9 * target / _bytes_per_event())
    print(f"{args.per_second:g} tombstones a second; each pass after 64 micro-batches' files")
    print(f"{'history':<10}{'events':>12}{'pass, s':>10}{'baseline':>10}{'ratio':>8}"
          f"{'MB rewritten':>14}{'baseline':>10}{'files':>7}{'baseline':>10}")
    for days in (float(d) for d in args.days.split(",")):
        events = int(days * 86_400 * args.per_second)
        ours: list[tuple[float, int, int]] = []
        theirs: list[tuple[float, int, int]] = []
        for _ in range(args.repeat):
            lake = tempfile.mkdtemp(prefix="ledger-compaction-")
            try:
                ledger, path = _ledger(lake + "/a", events, per_file)
                ours.append(_pass(path, functools.partial(ledger.compact, TOPIC)))
                # the baseline's ledger: the whole history in one file, as it compacted
                _, path = _ledger(lake + "/b", events, max(events, 1))
                theirs.append(_pass(path, DeltaTable(path).optimize.compact))
            finally:
                shutil.rmtree(lake, ignore_errors=True)
        a = statistics.median(s for s, _, _ in ours)
        b = statistics.median(s for s, _, _ in theirs)
        print(f"{days:g} days{'':<5}{events:>12,}{a:>10.3f}{b:>10.3f}{a / b:>7.2f}x"
              f"{ours[-1][1] / 1e6:>14.1f}{theirs[-1][1] / 1e6:>10.1f}{ours[-1][2]:>7}"
              f"{theirs[-1][2]:>10}")


if __name__ == "__main__":
    main()
