"""Every app transaction read at once from the checkpoint and later commits, against
delta-rs's own lookup of each."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from compactor.lake.app_transactions import app_transactions, position_lookup
from compactor.lake.storage import LOCAL


def _commit(path: str, versions: dict[str, int]) -> None:
    write_deltalake(path, pa.table({"x": [1]}), mode="append", commit_properties=CommitProperties(
        app_transactions=[Transaction(a, v) for a, v in versions.items()]))


@pytest.mark.parametrize("checkpoint", [False, True])
def test_every_position_is_the_one_delta_rs_finds(tmp_path: Path, checkpoint: bool) -> None:
    path = str(tmp_path / "t")
    _commit(path, {f"compactor-ingest-{p}": 10 + p for p in range(300)})
    _commit(path, {f"compactor-cleaner-{p}": 5 for p in range(0, 300, 3)})
    if checkpoint:
        DeltaTable(path).create_checkpoint()
    _commit(path, {"compactor-ingest-7": 99, "compactor-cleaner-3": 6})  # later ones win
    _commit(path, {})
    table = DeltaTable(path)

    found = app_transactions(table, path, LOCAL)
    assert found is not None and len(found) == 400
    for app_id in [*found, "compactor-ingest-300", "compactor-rewrite-1"]:  # absent ones too
        assert found.get(app_id) == table.transaction_version(app_id), app_id
    assert found["compactor-ingest-7"] == 99 and found["compactor-cleaner-3"] == 6


def test_a_table_whose_positions_expire_is_looked_up_one_by_one(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"x": [1]}), configuration={
        "delta.setTransactionRetentionDuration": "interval 1 days"})
    _commit(path, {"compactor-ingest-0": 4})
    table = DeltaTable(path)
    assert app_transactions(table, path, LOCAL) is None
    assert position_lookup(table, path, LOCAL)("compactor-ingest-0") == 4
