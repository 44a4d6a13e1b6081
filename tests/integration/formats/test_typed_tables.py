"""Typed tables end to end: real broker, real registry wire format, real Spark and Delta.

Producers use confluent-kafka's own serializers against the embedded registry, so the bytes
on the broker are what a Confluent producer writes.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.formats.exceptions import SchemaRegistryUnavailableError
from compactor.lake.layout import topic_paths
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import (
    compactor,
    created,
    find_markers,
    free_port,
    lake_offsets,
    log_table,
    rejected_table,
    run_once,
    running,
    write_config,
)
from tests.proto_messages import message_classes, shop_file

USER_V1 = {"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
USER_V2 = {"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "country", "type": "string", "default": ""}]}
USER_RETYPED = {"type": "record", "name": "User", "fields": [
    {"name": "id", "type": "string"}, {"name": "name", "type": "string"}]}


def _avro(registry_url: str, topic: str, schema: dict, value: dict) -> bytes:
    client = SchemaRegistryClient({"url": registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    return AvroSerializer(client, json.dumps(schema))(value, ctx)


def _table(config, topic: str) -> dict[bytes, dict]:
    rows = DeltaTable(topic_paths(config.lake_path, topic).table).to_pyarrow_table().to_pylist()
    return {r["key"]: r for r in rows}


@pytest.mark.usefixtures("spark")
def test_avro_evolves_rejects_and_erases(broker, topic_factory, lake_config,
                                         schema_registry) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    url = schema_registry.url
    v1a = _avro(url, topic, USER_V1, {"id": 1, "name": "ann"})
    v1b = _avro(url, topic, USER_V1, {"id": 2, "name": "bob"})
    v2b = _avro(url, topic, USER_V2, {"id": 2, "name": "bob", "country": "DE"})
    SchemaRegistryClient({"url": url}).set_compatibility(f"{topic}-value", "NONE")
    retyped = _avro(url, topic, USER_RETYPED, {"id": "one", "name": "ann"})
    records = [
        Record(b"u1", v1a, 0), Record(b"u2", v1b, 0),
        Record(b"u3", b"\x01not avro", 0),  # wrong magic byte
        Record(b"u2", v2b, 0),  # a new field with a default: a new column
        Record(b"u4", b"\x00\x00\x00\x03\xe7" + v1a[5:], 0),  # schema id 999: unknown
        Record(b"u1", retyped, 0),  # id long -> string: a type change
        Record(b"u3", None, 0),  # a tombstone needs no decoding and erases u3's rejected row
        Record(b"u5", v1a, 0), Record(b"u5", None, 0),
    ]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic, log_cleaner_enable="false", value_format="avro",
                         schema_registry_url=url)
    summary = run_once(config)

    # The log is still the exact mirror, byte for byte, bad records included.
    assert [(r["key"], r["value"]) for r in log_table(config, topic).to_pylist()] == [
        (r.key, r.value) for r in records]
    # Ingest reports what does not decode (the wrong magic byte, id 999); the type change is
    # found by the table's MERGE, against the table's columns.
    assert summary.ingest.rejected == 2
    table = _table(config, topic)
    assert sorted(table) == [b"u1", b"u2"]
    # u1 keeps its last value that the table can hold; u2 gained the new column.
    assert (table[b"u1"]["id"], table[b"u1"]["name"], table[b"u1"]["country"]) == (1, "ann",
                                                                                   None)
    assert (table[b"u2"]["id"], table[b"u2"]["name"], table[b"u2"]["country"]) == (2, "bob",
                                                                                   "DE")
    types = {f.name: f.type for f in DeltaTable(topic_paths(config.lake_path, topic).table)
             .to_pyarrow_table().schema}
    assert str(types["id"]) == "int64" and "string" in str(types["country"])
    rejected = {r["offset"]: r for r in rejected_table(config, topic).to_pylist()}
    assert sorted(rejected) == [4, 5]  # offset 2 (u3) was erased by its tombstone
    assert rejected[4]["schemaId"] == 999 and "unknown schema id 999" in rejected[4]["reason"]
    assert rejected[4]["value"] == records[4].value  # the original bytes
    retyped_id = int.from_bytes(retyped[1:5], "big")  # the id its producer was given
    assert rejected[5]["schemaId"] == retyped_id and "type change" in rejected[5]["reason"]


@pytest.mark.usefixtures("spark")
def test_json_with_a_declared_schema(broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    records = [
        Record(b"a", b'{"id": 1, "address": {"city": "Oslo"}, "tags": ["x"]}', 0),
        Record(b"b", b'{"id": "two"}', 0),  # does not fit BIGINT
        Record(b"c", b"{broken", 0),
        Record(b"a", b'{"id": 11, "address": {"city": "Bergen"}}', 0),
    ]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic, log_cleaner_enable="false", key_format="string",
                         value_format="json", value_schema="id BIGINT, address "
                         "STRUCT<city: STRING>, tags ARRAY<STRING>")
    run_once(config)
    table = _table(config, topic)
    assert sorted(table) == [b"a"]
    row = table[b"a"]
    assert (row["key_decoded"], row["id"], row["address"], row["tags"]) == (
        "a", 11, {"city": "Bergen"}, None)
    reasons = {r["key"]: r["reason"] for r in rejected_table(config, topic).to_pylist()}
    assert reasons[b"b"].startswith("value: does not match the declared schema")
    assert reasons[b"c"].startswith("value: not valid JSON")


@pytest.mark.usefixtures("spark")
def test_json_times_as_spark_reads_them_and_rejections_said_loudly(
        broker, topic_factory, lake_config, caplog) -> None:
    """ISO-8601 strings and epoch seconds fill TIMESTAMP and DATE columns, as Spark's JSON
    reader fills them; a record that still does not fit is named, with its field's path, in
    a WARN line of its batch, and counted by kind."""
    import logging

    from compactor.ops.metrics import Metrics

    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [
        Record(b"a", b'{"updated_at": "2024-05-01T12:00:00Z", "day": "2024-05-01"}', 0),
        Record(b"b", b'{"updated_at": 1714564800, "day": "2024-05-01T23:30:00-02:00"}', 0),
        Record(b"c", b'{"updated_at": "yesterday"}', 0),
    ])
    config = lake_config(topic, log_cleaner_enable="false", key_format="string",
                         value_format="json", value_schema="updated_at TIMESTAMP, day DATE")
    metrics = Metrics(config)
    with caplog.at_level(logging.WARNING, logger="streaming.query"):
        Service(config).run(once=True, on_batch=metrics.on_batch)
    table = _table(config, topic)
    assert sorted(table) == [b"a", b"b"]
    columns = DeltaTable(topic_paths(config.lake_path, topic).table).schema().fields
    assert [f.name for f in columns][-3:] == ["key_decoded", "updated_at", "day"]  # as declared
    noon = dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC)
    assert (table[b"a"]["updated_at"], table[b"a"]["day"]) == (noon, dt.date(2024, 5, 1))
    assert (table[b"b"]["updated_at"], table[b"b"]["day"]) == (noon, dt.date(2024, 5, 2))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("1 record(s) of batch" in w and "(1 undecodable)" in w and
               "updated_at: expected TIMESTAMP, found a string (not an ISO-8601 time)" in w
               for w in warned), warned
    # The log names the rule, never the record: logs are copies no erasure reaches.
    assert not any("yesterday" in w for w in warned), warned
    [reason] = rejected_table(config, topic).column("reason").to_pylist()
    assert reason.endswith('; quoting the record: "yesterday"')  # erased with the row
    assert metrics.registry.get_sample_value(
        "compactor_records_rejected_total", {"topic": topic, "reason": "undecodable"}) == 1


@pytest.mark.usefixtures("spark")
def test_a_newer_record_of_a_key_removes_its_dead_letters(broker, topic_factory,
                                                          lake_config) -> None:
    """A rejected copy of a value goes as the log's copy does: once any newer record of the
    key supersedes it, not only a tombstone."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [
        Record(b"a", b"{broken", 0), Record(b"b", b'{"id": "two"}', 0),
        Record(b"a", b'{"id": 1}', 0),  # a's dead letter is superseded
        Record(b"b", b"{also broken", 0),  # so is b's first, by a record that is rejected too
    ])
    config = lake_config(topic, log_cleaner_enable="false", value_format="json",
                         value_schema="id BIGINT")
    run_once(config)
    assert sorted((r["key"], r["offset"]) for r in rejected_table(config, topic).to_pylist()
                  ) == [(b"b", 3)]


@pytest.mark.usefixtures("spark")
def test_json_schema_from_the_registry(broker, topic_factory, lake_config,
                                       schema_registry, tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    schema = {"type": "object", "properties": {"sku": {"type": "string"},
                                               "qty": {"type": "integer"}}}
    client = SchemaRegistryClient({"url": schema_registry.url})
    ser = JSONSerializer(json.dumps(schema), client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    produce(broker.bootstrap_servers, topic, [
        Record(b"o1", ser({"sku": "A-1", "qty": 3}, ctx), 0),
        Record(b"o2", ser({"sku": "B-2", "qty": 5}, ctx), 0)])
    config = lake_config(topic, log_cleaner_enable="false", value_format="json-schema",
                         schema_registry_url=schema_registry.url)
    run_once(config)
    table = _table(config, topic)
    assert {k: (r["sku"], r["qty"]) for k, r in table.items()} == {
        b"o1": ("A-1", 3), b"o2": ("B-2", 5)}

    # The CLI, as a user runs it: read decodes, describe-config shows formats and registry.
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path, "value.format": "json-schema",
        "schema.registry.url": schema_registry.url,
        "schema.registry.basic.auth.user.info": "reader:s3cret"})
    read = compactor("read", "--config", str(conf), "--topic", topic)
    assert read.returncode == 0, read.stderr[-2000:]
    assert [json.loads(line)["value"] for line in read.stdout.splitlines()] == [
        {"sku": "A-1", "qty": 3}, {"sku": "B-2", "qty": 5}]
    raw = compactor("read", "--config", str(conf), "--topic", topic, "--value-format", "hex")
    assert json.loads(raw.stdout.splitlines()[0])["value"].startswith("00000000")
    described = compactor("describe-config", "--config", str(conf), "--json")
    assert described.returncode == 0, described.stderr[-2000:]
    doc = json.loads(described.stdout)
    assert doc["topics"][topic]["value.format"]["value"] == "json-schema"
    assert doc["pipeline"]["schema.registry.basic.auth.user.info"] == "reader:[redacted]"
    assert "s3cret" not in described.stdout


@pytest.mark.usefixtures("spark")
def test_protobuf_without_generated_classes(broker, topic_factory, lake_config,
                                            schema_registry, tmp_path) -> None:
    """Decoded from the registry's descriptors alone; a second message type of the same
    file (message indexes [1]), a new field, a type change and broken bytes."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    client = SchemaRegistryClient({"url": schema_registry.url})
    client.set_compatibility(f"{topic}-value", "NONE")
    ctx = SerializationContext(topic, MessageField.VALUE)

    def serialize(proto, message: str, **fields) -> bytes:
        cls = message_classes(proto)[message]
        return ProtobufSerializer(cls, client, {"use.deprecated.format": False})(
            cls(**fields), ctx)

    v1 = serialize(shop_file(1), "Customer", name="ann", age=41, points=2**64 - 1,
                   tags=["a"], tier=1, counters={"logins": 7})
    v2 = serialize(shop_file(2), "Customer", name="bob", age=7, country="NO")
    order = serialize(shop_file(1), "Order", id="o-1")
    retyped = serialize(shop_file(1, age_type="string", name="shop2.proto"), "Customer",
                        name="cy", age="old")
    records = [Record(b"c1", v1, 0), Record(b"c2", v2, 0), Record(b"o1", order, 0),
               Record(b"c3", retyped, 0), Record(b"c4", v1[:7] + b"\xff\xff", 0),
               Record(b"c5", v1, 0), Record(b"c5", None, 0)]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic, log_cleaner_enable="false", value_format="protobuf",
                         schema_registry_url=schema_registry.url)
    summary = run_once(config)
    assert summary.ingest.rejected == 1  # the broken bytes; the type change is the MERGE's
    table = _table(config, topic)
    assert sorted(table) == [b"c1", b"c2", b"o1"]
    c1, c2, o1 = table[b"c1"], table[b"c2"], table[b"o1"]
    assert (c1["name"], c1["age"], c1["points"], c1["tags"], c1["tier"]) == (
        "ann", 41, 2**64 - 1, ["a"], "GOLD")
    assert (c1["counters"], c1["nickname"], c1["country"]) == ([("logins", 7)], None, None)
    assert (c2["name"], c2["country"], c2["tier"]) == ("bob", "NO", "FREE")
    assert (o1["id"], o1["name"]) == ("o-1", None)  # Order: its own column, Customer's null
    rejected = {r["key"]: r for r in rejected_table(config, topic).to_pylist()}
    assert sorted(rejected) == [b"c3", b"c4"]
    assert "type change" in rejected[b"c3"]["reason"]
    assert "cannot be decoded with schema id" in rejected[b"c4"]["reason"]
    assert rejected[b"c4"]["value"] == records[4].value

    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path, "value.format": "protobuf",
        "schema.registry.url": schema_registry.url, "downstream.m.path": str(tmp_path / "m"),
        "downstream.m.topic": topic, "downstream.m.key.column": "id",
        "downstream.m.key.format": "protobuf:id"})
    described = compactor("describe-config", "--config", str(conf), "--json")
    assert described.returncode == 0, described.stderr[-2000:]
    assert json.loads(described.stdout)["pipeline"]["downstream.m.key.format"] == "protobuf:id"
    read = compactor("read", "--config", str(conf), "--topic", topic)
    assert read.returncode == 0, read.stderr[-2000:]
    first = json.loads(read.stdout.splitlines()[0])["value"]
    # uint64 as a string, as in Protobuf's own JSON mapping (it exceeds a JSON double)
    assert (first["name"], first["tier"], first["points"]) == ("ann", "GOLD", str(2**64 - 1))


@pytest.mark.usefixtures("spark")
def test_a_registry_that_is_down_fails_the_batch_and_commits_nothing(
        broker, topic_factory, lake_config, schema_registry) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    value = _avro(schema_registry.url, topic, USER_V1, {"id": 1, "name": "ann"})
    produce(broker.bootstrap_servers, topic, [Record(b"u1", value, 0)])
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = lake_config(topic, log_cleaner_enable="false", value_format="avro",
                         schema_registry_url=down)
    with pytest.raises(SchemaRegistryUnavailableError) as failed:
        run_once(config)
    assert failed.value.exit_code == 3 and down in str(failed.value)
    assert lake_offsets(topic_paths(config.lake_path, topic).log) == []
    # The registry back: the same records are mirrored and decoded, nothing was lost.
    config = lake_config(topic, log_cleaner_enable="false", value_format="avro",
                         schema_registry_url=schema_registry.url)
    run_once(config)
    assert _table(config, topic)[b"u1"]["name"] == "ann"


M = 10_000


@pytest.mark.slow
@pytest.mark.usefixtures("spark")
def test_typed_rows_and_rejected_copies_are_erased_by_the_deadline(
        broker, topic_factory, lake_config, schema_registry) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact", "max.compaction.lag.ms": str(M),
                              "min.cleanable.dirty.ratio": "0.99"})
    run = uuid.uuid4().hex[:8]

    def marker(key: int) -> str:
        return f"MARK-{run}-{key}"

    url = schema_registry.url
    typed = [Record(b"user-%d" % k, _avro(url, topic, USER_V1, {"id": k, "name": marker(k)}),
                    k % 2) for k in range(8)]
    # An undecodable copy of user-1's data: it lands in the log and in L/T/rejected.
    bad = [Record(b"user-1", b"\x07" + marker(100).encode(), 1)]
    erase = [Record(b"user-%d" % k, None, k % 2) for k in (0, 1)]
    config = lake_config(topic, trigger_interval_ms="500", log_cleaner_backoff_ms="1000",
                         value_format="avro", schema_registry_url=url,
                         **{"table.merge.interval.ms": "2000"})
    service = Service(config)
    with running(service) as failures:
        produce(broker.bootstrap_servers, topic, [Record(b"warm-up", typed[7].value, 1)])
        log_dir = topic_paths(config.lake_path, topic).log
        wait_until(lambda: created(log_dir) and lake_offsets(log_dir), 120,
                   "the mirror to commit the warm-up")
        produce(broker.bootstrap_servers, topic, typed + bad)
        wait_until(lambda: find_markers(config.lake_path, [marker(100).encode()])[
            marker(100).encode()], 60, "the undecodable record in the lake")
        produce(broker.bootstrap_servers, topic, erase)
        erased_at = time.time() * 1000
        while time.time() * 1000 < erased_at + M + config.cleaner.backoff_ms:
            time.sleep(0.1)
        markers = [marker(k).encode() for k in (*range(8), 100)]
        found = find_markers(config.lake_path, markers)
    assert not failures, failures
    dead = [marker(k).encode() for k in (0, 1, 100)]
    assert {m: p for m, p in found.items() if m in dead and p} == {}
    for k in range(2, 8):  # live rows: in the log and, decoded, in the typed table
        paths = found[marker(k).encode()]
        assert any("/log/" in p for p in paths) and any("/table/" in p for p in paths), paths
