"""Tombstones carried to downstream tables (real Delta tables, no broker)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from compactor.config import build_config, with_topic_configs
from compactor.erasure.downstream import DownstreamEraser, check_downstream
from compactor.exceptions import ConfigError
from compactor.positions import ERASE
from tests.lake import append

T0 = 1_700_000_000_000
SAFE = {"delta.dataSkippingStatsColumns": "plan", "delta.deletedFileRetentionDuration":
        "interval 1 seconds"}


def make_downstream(path: Path, properties: dict[str, str] | None = None) -> None:
    write_deltalake(str(path), pa.table({
        "user_id": ["u1", "u2", "u3", "u4"], "plan": ["free", "pro", "pro", "team"],
        "email": [b"SECRET-u1", b"SECRET-u2", b"SECRET-u3", b"SECRET-u4"]}),
        configuration=SAFE if properties is None else properties)


def config_for(tmp_path: Path, **extra: str):
    raw = {"bootstrap.servers": "127.0.0.1:9", "topics": "users",
           "lake.path": str(tmp_path / "lake"), "cleanup.policy": "compact",
           "downstream.marts.path": str(tmp_path / "marts"), "downstream.marts.topic": "users",
           "downstream.marts.key.column": "user_id", "downstream.marts.key.format": "json:id",
           "downstream.marts.stats.columns": "plan", **extra}
    return with_topic_configs(build_config(raw), {})


def rows(path: Path) -> list[str]:
    return sorted(DeltaTable(str(path)).to_pyarrow_table().column("user_id").to_pylist())


def test_tombstones_delete_matching_rows_exactly_once(tmp_path: Path) -> None:
    make_downstream(tmp_path / "marts")
    config = config_for(tmp_path)
    check_downstream(config)
    append(config, "users", 0, [(0, b'{"id":"u1"}', b"v", T0), (1, b'{"id":"u1"}', None, T0),
                                (2, b'{"id":"u3"}', b"v", T0)], now_ms=T0)
    append(config, "users", 1, [(0, b'{"id":"u4"}', None, T0), (1, b"not json", None, T0)],
           now_ms=T0)
    eraser = DownstreamEraser(config)
    assert eraser.catch_up("users") == {"marts": {0: 2, 1: 1}}  # finished up to these offsets
    assert rows(tmp_path / "marts") == ["u2", "u3"]
    table = DeltaTable(str(tmp_path / "marts"))
    assert ERASE.read(table, 0, "users") == 2
    assert ERASE.read(table, 1, "users") == 1
    version = table.version()
    assert DownstreamEraser(config).catch_up("users") == {}  # a restart re-applies nothing
    assert DeltaTable(str(tmp_path / "marts")).version() == version
    append(config, "users", 0, [(3, b'{"id":"u2"}', None, T0)], now_ms=T0)
    assert eraser.catch_up("users") == {"marts": {0: 3}}
    assert rows(tmp_path / "marts") == ["u3"]
    for f in (tmp_path / "marts" / "_delta_log").iterdir():
        text = f.read_bytes()  # a literal predicate would read t.user_id = 'u1'
        assert not any(q + k + q in text for k in (b"u1", b"u2", b"u4") for q in (b"'", b'"'))


@pytest.mark.parametrize(("properties", "extra", "rule"), [
    ({"delta.deletedFileRetentionDuration": "interval 1 seconds"}, {},
     "collects statistics on its key column 'user_id'"),
    ({"delta.dataSkippingStatsColumns": "plan"}, {},
     "keeps removed files for 604800000 ms"),
    ({**SAFE, "delta.enableChangeDataFeed": "true"}, {},
     "has its change data feed on"),
    ({**SAFE, "delta.dataSkippingStatsColumns": "plan,email"}, {},
     "collects statistics on email .*list them in downstream.marts.stats.columns"),
    ({**SAFE, "delta.dataSkippingStatsColumns": "plan,email"},
     {"downstream.marts.stats.columns": "plan"}, "collects statistics on email"),
])
def test_downstream_tables_that_cannot_meet_the_deadline_are_refused(
        tmp_path: Path, properties: dict[str, str], extra: dict[str, str], rule: str) -> None:
    make_downstream(tmp_path / "marts", properties)
    config = config_for(tmp_path, **{"max.compaction.lag.ms": "60000", **extra})
    with pytest.raises(ConfigError, match=rule):
        check_downstream(config)


def test_a_missing_downstream_table_or_column_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a Delta table"):
        check_downstream(config_for(tmp_path))
    make_downstream(tmp_path / "marts")
    with pytest.raises(ConfigError, match="downstream.marts.key.column='email_hash'"):
        check_downstream(config_for(tmp_path, **{"downstream.marts.key.column": "email_hash"}))


def test_downstream_config_is_validated() -> None:
    base = {"bootstrap.servers": "h:1", "topics": "users", "lake.path": "/l"}
    with pytest.raises(ConfigError, match="downstream.m.key.column: is required"):
        build_config({**base, "downstream.m.path": "/x", "downstream.m.topic": "users"})
    with pytest.raises(ConfigError, match="downstream.m.topic='orders'"):
        build_config({**base, "downstream.m.path": "/x", "downstream.m.topic": "orders",
                      "downstream.m.key.column": "k"})
    table = {**base, "downstream.m.path": "/x", "downstream.m.topic": "users",
             "downstream.m.key.column": "k"}
    for bad in ("xml", "json", "string:id"):
        with pytest.raises(ConfigError, match="must be bytes, string, json:<field>, or avro"):
            build_config({**table, "downstream.m.key.format": bad})
    with pytest.raises(ConfigError, match="schema.registry.url='': is required: downstream.m"):
        build_config({**table, "downstream.m.key.format": "avro:id"})


@pytest.mark.parametrize(("key_format", "schema", "key_of"), [
    ("avro:id", {"type": "record", "name": "UserKey", "fields": [{"name": "id",
                                                                  "type": "string"}]},
     lambda user: {"id": user}),
    ("avro", "string", lambda user: user),
])
def test_keys_in_the_registry_wire_format_delete_their_rows(
        tmp_path: Path, schema_registry, key_format, schema, key_of) -> None:
    """Avro keys through the topic's registry: a record key's field, or a primitive key."""
    import json

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    make_downstream(tmp_path / "marts")
    config = config_for(tmp_path, **{"downstream.marts.key.format": key_format,
                                     "schema.registry.url": schema_registry.url})
    client = SchemaRegistryClient({"url": schema_registry.url})
    client.set_compatibility("users-key", "NONE")  # the session's registry: each case's own
    serialize = AvroSerializer(client, json.dumps(schema))
    ctx = SerializationContext("users", MessageField.KEY)
    keys = [serialize(key_of(user), ctx) for user in ("u1", "u3")]
    append(config, "users", 0, [(0, keys[0], None, T0), (1, keys[1], None, T0),
                                (2, b"\x01 not avro", None, T0)], now_ms=T0)
    assert DownstreamEraser(config).catch_up("users") == {"marts": {0: 2}}
    assert rows(tmp_path / "marts") == ["u2", "u4"]


def test_audit_finds_an_erased_key_in_a_downstream_table_until_it_is_vacuumed(
        tmp_path: Path) -> None:
    import time

    from compactor.erasure.audit import audit_key

    make_downstream(tmp_path / "marts")
    config = config_for(tmp_path, **{"max.compaction.lag.ms": "60000"})
    now = int(time.time() * 1000)
    append(config, "users", 0, [(0, b'{"id":"u1"}', b"v", now - 10),
                                (1, b'{"id":"u1"}', None, now)], now_ms=now)

    def downstream_traces() -> list[str]:
        return [t.table for t in audit_key(config, "users", b'{"id":"u1"}').traces
                if t.table.startswith("downstream")]

    before = audit_key(config, "users", b'{"id":"u1"}')
    assert [t.deadline_ms for t in before.traces if t.table == "downstream:marts"] == \
        [now + 60_000]
    DownstreamEraser(config).catch_up("users")
    # Deleted from the snapshot, but the old file is still on disk: still a trace.
    assert downstream_traces() == ["downstream:marts"]
    time.sleep(1.1)  # the table's file retention (1 s) must pass before vacuum may delete it
    DeltaTable(str(tmp_path / "marts")).vacuum(dry_run=False)
    assert downstream_traces() == []


def test_audit_reads_values_out_of_a_downstream_tables_checkpoints(tmp_path: Path) -> None:
    """A table kept statistics on its key (so the start refuses it): the audit finds the erased
    key in the transaction log's checkpoint too, where compression hides it from a byte search."""
    import time

    import pyarrow.fs as pafs

    from compactor.erasure.audit import _parquet_holds, audit_key

    make_downstream(tmp_path / "marts", {
        "delta.dataSkippingStatsColumns": "user_id",
        "delta.deletedFileRetentionDuration": "interval 0 seconds"})
    table = DeltaTable(str(tmp_path / "marts"))
    table.create_checkpoint()
    checkpoint = next((tmp_path / "marts" / "_delta_log").glob("*.checkpoint.parquet"))
    assert _parquet_holds(pafs.LocalFileSystem(), str(checkpoint), b"u1")
    assert not _parquet_holds(pafs.LocalFileSystem(), str(checkpoint), b"u9")
    config = config_for(tmp_path)
    now = int(time.time() * 1000)
    append(config, "users", 0, [(0, b'{"id":"u1"}', None, now)], now_ms=now)
    DownstreamEraser(config).catch_up("users")
    DeltaTable(str(tmp_path / "marts")).vacuum(dry_run=False, enforce_retention_duration=False,
                                               retention_hours=0)
    traces = [t for t in audit_key(config, "users", b'{"id":"u1"}').traces
              if t.table == "downstream:marts"]
    assert traces and all(t.never for t in traces)
    assert any(t.path.endswith(checkpoint.name) for t in traces)
