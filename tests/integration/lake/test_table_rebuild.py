"""A schema fixed after its records were rejected: ``compactor rebuild-table`` brings them back.

The life of a dead letter, as a user meets it: a JSON topic declared with the wrong type for a
field sends every record to ``L/T/rejected``; the schema is fixed; the table is rebuilt from
the log, the records are rows, their dead letters are gone, the record that is still bad
stays rejected, and the table keeps its Delta properties.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from tests.integration.helpers import compactor, write_config


@pytest.mark.usefixtures("spark")
def test_rebuild_table_after_a_schema_fix(broker, topic_factory, tmp_path: Path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [
        Record(b"a", b'{"id": 1, "updated_at": "2024-05-01T12:00:00Z"}', 0),
        Record(b"b", b'{"id": 2, "updated_at": "2024-05-02T12:00:00Z"}', 1),
        Record(b"c", b'{"id": "three", "updated_at": "2024-05-03T12:00:00Z"}', 0),
        Record(b"a", None, 1),  # a tombstone in the other partition: a stays erased
        Record(b"d", b'{"id": 4, "updated_at": "2024-05-04T12:00:00Z"}', 1),
    ])
    settings = {"bootstrap.servers": broker.bootstrap_servers, "topics": topic,
                "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "ck"),
                "log.cleaner.enable": "false", f"topic.{topic}.key.format": "string",
                f"topic.{topic}.value.format": "json"}
    wrong = write_config(tmp_path / "wrong.properties", **settings, **{
        f"topic.{topic}.value.schema": "id BIGINT, updated_at INT"})
    ran = compactor("run", "--once", "--config", str(wrong))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "went to" in ran.stderr and "updated_at: expected INT" in ran.stderr
    paths = topic_paths(str(tmp_path / "lake"), topic)
    assert DeltaTable(paths.table).to_pyarrow_table().num_rows == 0
    assert len(rejected_table_of(paths.rejected)) == 3  # b, c, d (a's went with its tombstone)

    fixed = write_config(tmp_path / "fixed.properties", **settings, **{
        f"topic.{topic}.value.schema": "id BIGINT, updated_at TIMESTAMP"})
    rebuilt = compactor("rebuild-table", "--config", str(fixed), "--topic", topic, "--json",
                        "--batch", "1")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    result = json.loads(rebuilt.stdout)
    assert (result["rows"], result["dead_letters_dropped"]) == (2, 2)
    rows = {r["key"]: r for r in DeltaTable(paths.table).to_pyarrow_table().to_pylist()}
    assert sorted(rows) == [b"b", b"d"]
    assert rows[b"d"]["id"] == 4 and rows[b"d"]["updated_at"].day == 4
    dead = rejected_table_of(paths.rejected)
    assert [(r["key"], "id: expected BIGINT" in r["reason"]) for r in dead] == [(b"c", True)]
    props = DeltaTable(paths.table).metadata().configuration
    assert props.get("delta.enableChangeDataFeed") == "false"
    again = compactor("run", "--once", "--config", str(fixed))  # the mirror takes over again
    assert again.returncode == 0, again.stderr[-3000:]
    assert DeltaTable(paths.table).to_pyarrow_table().num_rows == 2


def rejected_table_of(path: str) -> list[dict]:
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def test_rebuild_table_refuses_a_batch_of_zero(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "127.0.0.1:9", "topics": "t", "lake.path": str(tmp_path)})
    done = compactor("rebuild-table", "--config", str(conf), "--topic", "t", "--batch", "0")
    assert done.returncode == 2
    assert "--batch=0: must be a positive whole number" in done.stderr
