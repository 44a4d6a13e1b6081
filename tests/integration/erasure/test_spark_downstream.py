"""GDPR into tables Spark wrote: downstream erasure targets created by delta-spark with the
table features Spark users turn on.

Partitioned and column-mapped tables are erased (the rows and, after vacuum, every byte of
them gone, and delta-spark reads what the mirror left); deletion vectors, a change data feed
and features the mirror's writer does not handle are refused at start, naming the feature.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from compactor.cleaner.vacuum import Vacuum
from compactor.config import build_config, with_topic_configs
from compactor.erasure.audit import audit_key
from compactor.erasure.downstream import DownstreamEraser, check_downstream
from compactor.exceptions import ConfigError
from tests.conftest import wait_until
from tests.lake import append
from tests.lakehouse.delta_spark import run_job

SAFE = {"delta.dataSkippingStatsColumns": "plan",
        "delta.deletedFileRetentionDuration": "interval 1 seconds"}
TABLES = {
    "partitioned": {"properties": SAFE, "partition_by": ["region"]},
    "column_mapped": {"properties": {**SAFE, "delta.columnMapping.mode": "name"}},
    "deletion_vectors": {"properties": {**SAFE, "delta.enableDeletionVectors": "true"}},
    "change_feed": {"properties": {**SAFE, "delta.enableChangeDataFeed": "true"}},
    "row_tracking": {"properties": {**SAFE, "delta.enableRowTracking": "true"}},
}
REFUSED = {
    "deletion_vectors": "uses deletion vectors \\(table feature deletionVectors\\)",
    "change_feed": "has its change data feed on",
    "row_tracking": "needs table feature\\(s\\) .*rowTracking",
}


@pytest.fixture(scope="module")
def spark_tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The downstream tables, created once by delta-spark (four users each)."""
    root = tmp_path_factory.mktemp("spark-tables")
    run_job({"create": {str(root / name): spec for name, spec in TABLES.items()}})
    return root


def _config(tmp_path: Path, table: Path):  # type: ignore[no-untyped-def]
    return with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": "users", "lake.path": str(tmp_path),
        "cleanup.policy": "compact", "max.compaction.lag.ms": "60000",
        "downstream.marts.path": str(table), "downstream.marts.topic": "users",
        "downstream.marts.key.column": "user_id", "downstream.marts.stats.columns": "plan"}), {})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_table_the_mirror_cannot_erase_is_refused_naming_the_feature(
        spark_tables: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=REFUSED[name]):
        check_downstream(_config(tmp_path, spark_tables / name))


def _erase(name: str, table: Path, tmp_path: Path, now: int) -> None:
    """Erase user-1 and user-4 from ``table`` as the mirror does; wait until vacuum took
    their files."""
    config = _config(tmp_path / name, table)
    check_downstream(config)
    append(config, "users", 0, [(0, b"user-1", None, now), (1, b"user-4", None, now)], now_ms=now)
    assert DownstreamEraser(config).catch_up("users") == {"marts": {0: 1}}

    erased = (b"user-1", b"user-4")

    def traces() -> list[str]:
        return [t.path for key in erased for t in audit_key(config, "users", key).traces
                if t.table == "downstream:marts"]

    # Before vacuum the audit finds the rows in the rewritten files (under column mapping too,
    # where the key column has a physical name in the data files).
    found = [t.what for key in erased for t in audit_key(config, "users", key).traces
             if t.table == "downstream:marts"]
    assert found and all("row(s) of an erased key" in w for w in found), (name, found)
    # Vacuum as the mirror runs it, once the table's 1 s file retention has passed.
    wait_until(lambda: not Vacuum(config.storage).run(str(table), 1000) and not traces(), 30,
               f"{name}: the erased rows' files vacuumed")
    leftovers = [f for f in table.rglob("*.parquet") if "_delta_log" not in f.parts
                 and (b"SECRET-user-1" in f.read_bytes() or b"SECRET-user-4" in f.read_bytes())]
    assert not leftovers, f"{name}: {leftovers}"


@pytest.mark.slow
def test_partitioned_and_column_mapped_tables_lose_every_byte_of_an_erased_key(
        spark_tables: Path, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    names = ("partitioned", "column_mapped")
    for name in names:
        _erase(name, spark_tables / name, tmp_path, now)
    seen = run_job({"keys": {str(spark_tables / n): "user_id" for n in names}})
    assert seen == {str(spark_tables / n): ["user-2", "user-3"] for n in names}
