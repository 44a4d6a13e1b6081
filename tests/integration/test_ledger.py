"""The erasure ledger on real Delta tables (no broker)."""

from __future__ import annotations

import time
from pathlib import Path

from deltalake import DeltaTable

from compactor.layout import topic_paths
from compactor.ledger import ErasureLedger, key_digest
from tests.lake import append, offline_config

T0 = 1_700_000_000_000


def test_tombstones_are_recorded_once_with_a_salted_digest_and_no_key(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    append(config, "t", 0, [(0, b"SECRET-alice", b"v", T0), (1, b"SECRET-alice", None, T0 + 5),
                            (2, b"SECRET-bob", None, T0 + 9)], now_ms=T0)
    ledger = ErasureLedger(config)
    assert ledger.record_tombstones("t") == 2
    assert ErasureLedger(config).record_tombstones("t") == 0  # a restart records nothing twice
    root = Path(topic_paths(config.lake_path, "t").root) / "erasures"
    rows = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    salt = str(DeltaTable(topic_paths(config.lake_path, "t").log).metadata().id).encode()
    assert sorted((r["offset"], r["keyDigest"], r["tombstoneTimeMs"], r["deadlineMs"])
                  for r in rows) == [(1, key_digest(salt, b"SECRET-alice"), T0 + 5, T0 + 60_005),
                                     (2, key_digest(salt, b"SECRET-bob"), T0 + 9, T0 + 60_009)]
    for f in root.rglob("*"):
        if f.is_file():
            assert b"SECRET" not in f.read_bytes(), f


def test_the_backlog_comes_from_the_events(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    now = int(time.time() * 1000)
    append(config, "t", 0, [(0, b"a", None, now), (1, b"b", None, now + 1)], now_ms=now)
    ledger = ErasureLedger(config)
    ledger.record_tombstones("t")
    backlog = ledger.backlog("t", now_ms=now + 1000)
    assert (backlog.pending, backlog.oldest_pending_age_ms, backlog.missed_deadlines) == \
        (2, 1000, 0)
    ledger.record_done("t", "table", {0: 1})
    ledger.record_done("t", "log", {0: 0})  # both targets done for offset 0, in time
    assert ledger.backlog("t", now_ms=now + 1000).pending == 1  # the log is not past offset 1
    late = ledger.backlog("t", now_ms=now + 70_000)
    assert late.pending == 1 and late.missed_deadlines == 1  # offset 1 is overdue
    ledger.record_done("t", "log", {0: 1})
    assert ledger.backlog("t", now_ms=now + 70_000) == type(late)(0, None, 0)
