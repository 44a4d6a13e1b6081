"""Vacuum wakes when removed files become deletable: the erasure deadline depends on it."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import RemoveAction

from compactor.cleaner.vacuum import (
    RETENTION_PROPERTY,
    Vacuum,
    ensure_properties,
    retention_interval,
    vacuum_due_ms,
)
from compactor.lake.storage import LOCAL


def _parquet_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


@pytest.mark.parametrize("grace_ms", [2500, 1000, 1])
def test_a_removed_file_is_deleted_at_the_instant_the_service_wakes_for_it(
        tmp_path, grace_ms) -> None:
    """The service wakes at vacuum_due_ms(removal, grace) and vacuums once; the file must be
    gone then. A retention rounded up to whole seconds (2500 ms -> 3 s) kept it, and it
    waited for the next pass, past the deadline (issue 19)."""
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"k": [1, 2, 3]}))
    table = DeltaTable(str(path))
    ensure_properties(table, grace_ms)
    before = _parquet_files(path)
    table = DeltaTable(str(path))
    removed_ms = int(time.time() * 1000)
    # As a cleaning commit does: the remove action carries the time the service noted.
    [add] = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    table.create_write_transaction(
        [RemoveAction(add["path"], True, removed_ms, add["size_bytes"])], "append",
        table.schema())
    assert _parquet_files(path) == before  # still there for readers of older snapshots

    due = vacuum_due_ms(removed_ms, grace_ms)
    while time.time() * 1000 < due:  # the promise is about this instant
        time.sleep(0.005)
    deleted = Vacuum(LOCAL).run(str(path), grace_ms)
    assert deleted and _parquet_files(path) == set(), (
        DeltaTable(str(path)).metadata().configuration.get(RETENTION_PROPERTY), deleted)


def test_the_retention_property_is_exact() -> None:
    assert retention_interval(2500) == "interval 2500 milliseconds"
    assert retention_interval(3000) == "interval 3 seconds"
    assert retention_interval(0) == "interval 0 milliseconds"


@pytest.mark.parametrize("tidy", [True, False])
def test_vacuum_removes_the_segment_directories_it_emptied(tmp_path, tidy) -> None:
    path = tmp_path / "log"
    write_deltalake(str(path), pa.table({"segment": [0, 7], "k": [1, 2]}),
                    partition_by=["segment"])
    table = DeltaTable(str(path))
    ensure_properties(table, 1)
    table = DeltaTable(str(path))
    removed = [a for a in pa.table(table.get_add_actions(flatten=True)).to_pylist()
               if a["path"].startswith("segment=7/")]
    table.create_write_transaction(
        [RemoveAction(a["path"], True, int(time.time() * 1000), a["size_bytes"],
                      {"segment": "7"}) for a in removed], "append", table.schema(),
        partition_by=["segment"])
    time.sleep(0.1)  # past the 1 ms grace
    deleted = Vacuum(LOCAL).run(str(path), 1, tidy=tidy)
    assert deleted == [removed[0]["path"]]
    assert (path / "segment=7").exists() is not tidy
    assert (path / "segment=0").is_dir() and (path / "_delta_log").is_dir()


def test_our_tables_checkpoint_and_expire_their_logs(tmp_path) -> None:
    """86,400 commits a day at a 1 s trigger: the log must checkpoint and forget."""
    from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, ensure_table

    path = str(tmp_path / "log")
    table = ensure_table(path, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    props = table.metadata().configuration
    assert props["delta.checkpointInterval"] == "10"
    assert props["delta.logRetentionDuration"] == "interval 1 hours"  # until its first vacuum
    assert props["delta.enableExpiredLogCleanup"] == "false"  # the maintenance pass cleans
    for _ in range(20):
        table.create_write_transaction([], "append", LOG_SCHEMA,
                                       partition_by=LOG_PARTITION_COLUMNS)
    assert sorted(p.name for p in (tmp_path / "log" / "_delta_log").glob(
        "*.checkpoint.parquet")) == [f"{v:020d}.checkpoint.parquet" for v in (9, 19)]
    # (delta-rs counts versions from 0: the 10th and 20th commits)

    # A table made before these settings gets them at its next vacuum (one made with a day's
    # log retention too); the log retention follows the grace, never under ten minutes.
    old = tmp_path / "old"
    write_deltalake(str(old), pa.table({"k": [1]}),
                    configuration={"delta.logRetentionDuration": "interval 1 days"})
    ensure_properties(DeltaTable(str(old)), 2 * 86_400_000)
    props = DeltaTable(str(old)).metadata().configuration
    assert props["delta.logRetentionDuration"] == "interval 172800 seconds"
    assert props[RETENTION_PROPERTY] == "interval 172800 seconds"
    assert props["delta.checkpointInterval"] == "10"
    ensure_properties(DeltaTable(str(old)), 30_000)
    props = DeltaTable(str(old)).metadata().configuration
    assert props["delta.logRetentionDuration"] == "interval 600 seconds"
    assert props[RETENTION_PROPERTY] == "interval 30 seconds"


@pytest.mark.parametrize("idle", [True, False])
def test_a_file_whose_removal_a_checkpoint_forgot_is_still_deleted(tmp_path, idle) -> None:
    """A checkpoint written after a removal's grace leaves its expired remove action out, and
    Delta's vacuum then no longer knows the file. A service's vacuum of a topic without an
    erasure deadline must delete it all the same: it holds superseded values. Only while no
    commit of the service is being prepared: a file of a commit in flight looks the same."""
    import threading

    from compactor.cleaner.topic_vacuum import TopicVacuum
    from compactor.erasure.ledger import ErasureLedger
    from compactor.lake.layout import topic_paths
    from tests.lake import append, offline_config

    config = offline_config(str(tmp_path / "lake"), "t", cleanup_policy="compact",
                            vacuum_grace_ms=200)
    assert not config.topic("t").erasure_deadline
    now = int(time.time() * 1000)
    append(config, "t", 0, [(0, b"k", b"old value", now)], now)
    log = topic_paths(config.lake_path, "t").log
    table = DeltaTable(log)
    ensure_properties(table, 200)
    table = DeltaTable(log)
    [add] = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    table.create_write_transaction(
        [RemoveAction(add["path"], True, int(time.time() * 1000), add["size_bytes"],
                      {"partition": "0", "segment": "0"})],
        "append", table.schema(), partition_by=["partition", "segment"])
    time.sleep(0.5)  # past the grace
    DeltaTable(log).create_checkpoint()
    assert DeltaTable(log).vacuum(dry_run=True, enforce_retention_duration=True) == []
    removed = Path(log) / add["path"]
    assert removed.exists()

    vacuum = TopicVacuum(config, ErasureLedger(config), threading.Lock(), lambda: idle)
    vacuum.run("t")
    assert removed.exists() is not idle
