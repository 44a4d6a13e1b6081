"""The erasure ledger's retention on real Delta tables (no broker)."""

from __future__ import annotations

import time
from pathlib import Path

from deltalake import DeltaTable

from compactor.erasure.ledger import ErasureLedger, key_digest
from compactor.lake.layout import topic_paths
from tests.lake import append, offline_config

T0 = 1_700_000_000_000


def test_erasures_finished_before_the_retention_leave_the_ledger_and_stay_counted(
        tmp_path: Path) -> None:
    """The ledger's retention on a real Delta table: what every target finished before the
    cutoff leaves (its digests too, once vacuumed), what some target has not finished stays,
    and the late ones removed are still counted as missed, by a follower and a fresh read."""
    from compactor.positions import PRUNED, PRUNED_LATE

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000, erasure_ledger_retention_ms=3_600_000)
    now = int(time.time() * 1000)
    append(config, "t", 0, [(o, b"SECRET-%d" % o, None, now + o) for o in range(4)], now_ms=now)
    append(config, "t", 1, [(0, b"SECRET-p1", None, now)], now_ms=now)
    ledger = ErasureLedger(config)
    assert ledger.record_tombstones("t") == 5
    ledger.record_done("t", "table", {0: 2}, now_ms=now + 1_000)
    ledger.record_done("t", "log", {0: 1}, now_ms=now + 70_000)  # offsets 0-1: late
    ledger.record_done("t", "table", {1: 5}, now_ms=now + 1_000)  # ahead of the scan (0)
    ledger.record_done("t", "log", {1: 5}, now_ms=now + 1_000)
    # In one file, as the ledger's compaction leaves a long history: the DELETE then rewrites
    # tombstones and done events together (as string_view, which the readers must take).
    DeltaTable(ledger.path("t")).optimize.compact()
    later = now + 70_000 + 3_600_000 + 1
    before = ledger.backlog("t", now_ms=later)
    assert (before.pending, before.missed_deadlines) == (2, 4)  # 2-3 pending and overdue

    assert ledger.prune("t", now_ms=later) == 3  # partition 0 up to 1, partition 1 up to 0
    table = DeltaTable(ledger.path("t"))
    assert (PRUNED.read(table, 0), PRUNED.read(table, 1), PRUNED_LATE.read(table)) == (1, 0, 2)
    left = sorted((r["event"], r["partition"], r["offset"], r["target"])
                  for r in table.to_pyarrow_table().to_pylist())
    assert left == [("done", 0, 2, "table"), ("done", 1, 5, "log"), ("done", 1, 5, "table"),
                    ("tombstone", 0, 2, None), ("tombstone", 0, 3, None)]
    assert ledger.backlog("t", now_ms=later) == before  # the follower read it again
    assert ErasureLedger(config).backlog("t", now_ms=later) == before  # and so does a start
    assert ledger.prune("t", now_ms=later) == 0  # checked a moment ago
    version = table.version()
    assert ledger.prune("t", now_ms=later + 3_600_000) == 0  # nothing more has finished
    assert DeltaTable(ledger.path("t")).version() == version

    # What the DELETE rewrote leaves the disk at a vacuum past the grace: the digests with it.
    salt = str(DeltaTable(topic_paths(config.lake_path, "t").log).metadata().id).encode()
    gone = [key_digest(salt, b"SECRET-%d" % o) for o in (0, 1)] + [key_digest(salt, b"SECRET-p1")]
    DeltaTable(ledger.path("t")).vacuum(retention_hours=0, enforce_retention_duration=False,
                                        dry_run=False)
    files = [f.read_bytes() for f in Path(ledger.path("t")).rglob("*.parquet")]
    assert files and not any(d in f for d in gone for f in files)
    assert any(key_digest(salt, b"SECRET-2") in f for f in files)  # pending: still there


def test_a_retention_of_minus_one_keeps_every_erasure(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000, erasure_ledger_retention_ms=-1)
    append(config, "t", 0, [(0, b"a", None, T0)], now_ms=T0)
    ledger = ErasureLedger(config)
    ledger.record_tombstones("t")
    ledger.record_done("t", "table", {0: 0}, now_ms=T0)
    ledger.record_done("t", "log", {0: 0}, now_ms=T0)
    assert ledger.prune("t", now_ms=T0 + 10 * 365 * 86_400_000) == 0
    assert len(DeltaTable(ledger.path("t")).to_pyarrow_table()) == 3


def test_the_maintenance_pass_prunes_the_ledger(tmp_path: Path) -> None:
    from compactor.cleaner.maintenance import LogMaintenance

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000, erasure_ledger_retention_ms=60_000)
    append(config, "t", 0, [(0, b"a", None, T0), (1, b"b", None, T0 + 1)], now_ms=T0)
    maintenance = LogMaintenance(None, config)
    maintenance.run_pass(now_ms=T0 + 10)  # its tombstone readers record them in the ledger
    ledger = ErasureLedger(config)
    for target in ledger.targets("t"):
        ledger.record_done("t", target, {0: 1}, now_ms=T0 + 100)
    maintenance.run_pass(now_ms=T0 + 100 + 60_000 + 1)
    table = DeltaTable(ledger.path("t"))
    assert "PRUNE LEDGER" in [c.get("compactor.operation") for c in table.history()]
    assert not [r for r in table.to_pyarrow_table().to_pylist() if r["event"] == "tombstone"]


def test_a_ledger_that_cannot_be_read_is_kept_and_the_pass_goes_on(tmp_path: Path,
                                                                    caplog) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000, erasure_ledger_retention_ms=0)
    append(config, "t", 0, [(0, b"a", None, T0)], now_ms=T0)
    ledger = ErasureLedger(config)
    ledger.record_tombstones("t")
    for target in ledger.targets("t"):
        ledger.record_done("t", target, {0: 0}, now_ms=T0)
    for f in Path(ledger.path("t")).glob("*.parquet"):
        f.unlink()  # the files its log names are gone
    assert ledger.prune("t", now_ms=T0 + 1) == 0
    assert "cannot prune the erasure ledger" in caplog.text
