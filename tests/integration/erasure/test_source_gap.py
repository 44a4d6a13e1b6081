"""Kafka's cleaner removes a tombstone the mirror has not read: the lake erases the key anyway.

Against Apache Kafka itself: the mirror copies k=v and stops; a tombstone for k is produced and
Kafka's cleaner removes v and then, ``delete.retention.ms`` later, the tombstone. The restarted
mirror never reads a tombstone for k, yet v must leave every copy (log, latest-value table,
downstream table), the erasure ledger must say so, and a key the topic still holds must stay.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, TopicPartition
from deltalake import DeltaTable, write_deltalake

from compactor.config import build_config, resolve_config
from compactor.demo.workload import Record, produce
from compactor.erasure.audit import audit_key
from compactor.erasure.ledger import ErasureLedger
from compactor.lake.layout import topic_paths
from compactor.ops.status import collect_status
from tests.conftest import wait_until
from tests.integration.helpers import alter_topic, find_markers, log_table, run_once


def _config(servers: str, topic: str, tmp: Path, **extra: str) -> Any:
    return resolve_config(build_config({
        "bootstrap.servers": servers, "topics": topic,
        "lake.path": str(tmp / "lake"), "checkpoint.path": str(tmp / "checkpoints"),
        f"topic.{topic}.vacuum.grace.ms": "0", **extra}))


def _keys_on_kafka(servers: str, topic: str) -> set[bytes]:
    """Every key partition 0 of the topic holds a record of now (tombstones included)."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "t", "log_level": 0,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    keys: set[bytes] = set()
    try:
        while True:
            m = consumer.poll(10)
            assert m is not None, "no end of partition from Kafka"
            if m.error() is not None:
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                return keys
            keys.add(m.key())
    finally:
        consumer.close()


# Kafka refuses a batch larger than the topic's segments: batches stay under a segment.
SMALL_BATCHES = {"batch.size": "512", "linger.ms": "5"}


def _produce(servers: str, topic: str, records: list[Record]) -> None:
    produce(servers, topic, records, extra_config=SMALL_BATCHES)


def _fillers(n: int) -> list[Record]:
    return [Record(b"filler-%d" % i, b"x" * 100, 0) for i in range(n)]


def _kafka_forgot(servers: str, topic: str, key: bytes) -> bool:
    """Produce a few updates (Kafka cleans only dirty logs) and say whether the topic has no
    record of ``key`` left, its tombstone included."""
    _produce(servers, topic, _fillers(20))
    return key not in _keys_on_kafka(servers, topic)


def _rows_of(path: str, key: bytes) -> list[dict[str, Any]]:
    table = DeltaTable(path).to_pyarrow_table()
    return table.filter(pc.equal(table.column("key").cast(pa.binary()), key)).to_pylist()


def test_a_tombstone_kafka_removed_while_the_mirror_was_stopped_still_erases(
        kafka: Any, kafka_topic: Any, tmp_path: Path) -> None:
    servers = kafka.bootstrap_servers
    topic = kafka_topic(1, {"cleanup.policy": "compact", "internal.segment.bytes": "1024"})
    alter_topic(servers, topic, {"delete.retention.ms": "1000",
                                 "min.cleanable.dirty.ratio": "0.01"})
    secret = b"secret-" + uuid.uuid4().hex.encode()
    _produce(servers, topic, [Record(b"gone", secret, 0), Record(b"kept", b"still-here", 0),
                             *_fillers(20)])
    downstream = str(tmp_path / "users")
    write_deltalake(downstream, pa.table({"id": ["gone", "kept"], "v": [1, 2]}),
                    configuration={"delta.deletedFileRetentionDuration": "interval 0 seconds",
                                   "delta.dataSkippingNumIndexedCols": "0"})
    config = _config(servers, topic, tmp_path, **{
        f"topic.{topic}.max.compaction.lag.ms": "60000",  # an erasure deadline
        "downstream.users.topic": topic, "downstream.users.path": downstream,
        "downstream.users.key.column": "id"})
    run_once(config)
    paths = topic_paths(config.lake_path, topic)
    assert [r["value"] for r in _rows_of(paths.log, b"gone")] == [secret]

    # While the mirror is stopped: the tombstone, and Kafka's cleaner removing it.
    _produce(servers, topic, [Record(b"gone", None, 0), *_fillers(20)])
    wait_until(lambda: _kafka_forgot(servers, topic, b"gone"), 90,
               "Kafka's cleaner to remove the tombstone")

    run_once(config)

    assert _rows_of(paths.log, b"gone") == []
    assert _rows_of(paths.table, b"gone") == []
    assert DeltaTable(downstream).to_pyarrow_table().column("id").to_pylist() == ["kept"]
    assert [r["value"] for r in _rows_of(paths.table, b"kept")] == [b"still-here"]
    assert b"kept" in log_table(config, topic).column("key").to_pylist()
    assert find_markers(config.lake_path, [secret])[secret] == []
    salt = str(DeltaTable(paths.log).metadata().id).encode()
    events = ErasureLedger(config).reconciled(topic, salt, b"gone")
    assert events and events[0]["partition"] == 0
    assert ErasureLedger(config).reconciled(topic, salt, b"kept") == []
    assert audit_key(config, topic, b"gone").status(int(time.time() * 1000)) == "erased"
    topics, _ = collect_status(config)
    assert topics[0].source.reconciled_keys == len(ErasureLedger(config).reconciled(topic))
    assert topics[0].source.caught_up_ms is not None


def test_a_mirror_back_within_delete_retention_reads_the_tombstone_itself(
        kafka: Any, kafka_topic: Any, tmp_path: Path) -> None:
    servers = kafka.bootstrap_servers
    topic = kafka_topic(1, {"cleanup.policy": "compact"})
    produce(servers, topic, [Record(b"a", b"1", 0), Record(b"b", b"2", 0)])
    config = _config(servers, topic, tmp_path)
    run_once(config)
    first = collect_status(config)[0][0].source.caught_up_ms
    produce(servers, topic, [Record(b"a", None, 0)])
    run_once(config)

    history = DeltaTable(topic_paths(config.lake_path, topic).log).history()
    operations = {h.get("compactor.operation") for h in history}
    assert "RECONCILE" not in operations
    assert ErasureLedger(config).reconciled(topic) == []
    assert first is not None  # a new lake is caught up from the start
