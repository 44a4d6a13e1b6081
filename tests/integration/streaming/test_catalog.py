"""``catalog.register``: the mirror registers each topic's tables in the session's catalog (a
Hive metastore here), idempotently, and delta-spark sessions sharing it read them by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from tests.integration.helpers import compactor, write_config
from tests.lakehouse.delta_spark import run_job


@pytest.mark.slow
def test_the_mirror_registers_its_tables_and_delta_spark_reads_them_by_name(
        broker, topic_factory, tmp_path: Path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % (i % 7), b"v%d" % i, i % 2) for i in range(50)])
    metastore = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true"}
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "ck"),
        "spark.master": "local[1]", "spark.ui.enabled": "false",
        "catalog.register": "true", "catalog.database": "lakehouse",
        "catalog.table.prefix": "kafka_", **metastore})
    for _ in range(2):  # the second start finds them registered and leaves them
        done = compactor("run", "--once", "--config", str(conf))
        assert done.returncode == 0, done.stderr[-3000:]
    assert "registered in the catalog" not in done.stderr  # nothing new the second time
    paths = topic_paths(str(tmp_path / "lake"), topic)
    name = topic.replace("-", "_").lower()
    seen = run_job({"catalog": {"conf": metastore, "database": "lakehouse"}})
    assert seen == {
        f"lakehouse.kafka_{name}_log": {
            "rows": DeltaTable(paths.log).to_pyarrow_dataset().count_rows(),
            "location": f"file:{paths.log}", "format": "delta"},
        f"lakehouse.kafka_{name}_table": {
            "rows": 7, "location": f"file:{paths.table}", "format": "delta"},
    }
