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
    ensure_grace,
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
    ensure_grace(table, grace_ms)
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
