"""A key that moved partition (partitions were added to the topic) is erased in every one.

Against Apache Kafka: the mirror copies k=v from the topic's only partition; partitions are
added and k's tombstone lands in a new one, as a producer's partitioner would now send it.
Kafka keeps v in the old partition (it compacts each partition on its own); the mirror's
promise is per key, so v must leave every file of the lake, and the audit must say so.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewPartitions
from deltalake import DeltaTable

from compactor.config import build_config, resolve_config
from compactor.demo.workload import Record, produce
from compactor.erasure.audit import audit_key
from compactor.lake.layout import topic_paths
from tests.integration.helpers import find_markers, log_table, run_once


def _grow(servers: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    for future in admin.create_partitions([NewPartitions(topic, partitions)]).values():
        future.result(30)


def test_a_tombstone_in_a_new_partition_erases_the_value_in_the_old_one(
        kafka: Any, kafka_topic: Any, tmp_path: Path) -> None:
    servers = kafka.bootstrap_servers
    topic = kafka_topic(1, {"cleanup.policy": "compact"})
    secret = b"secret-" + uuid.uuid4().hex.encode()
    produce(servers, topic, [Record(b"user-4711", secret, 0), Record(b"stays", b"here", 0)])
    config = resolve_config(build_config({
        "bootstrap.servers": servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "checkpoints"),
        f"topic.{topic}.max.compaction.lag.ms": "60000",
        f"topic.{topic}.vacuum.grace.ms": "0"}))
    run_once(config)
    assert find_markers(config.lake_path, [secret])[secret] != []

    _grow(servers, topic, 3)
    produce(servers, topic, [Record(b"user-4711", None, 2)])
    run_once(config)

    rows = [r for r in log_table(config, topic).to_pylist() if r["key"] == b"user-4711"]
    assert [(r["partition"], r["value"]) for r in rows] == [(2, None)]  # the tombstone stays
    assert find_markers(config.lake_path, [secret])[secret] == []  # no copy of v anywhere
    table = DeltaTable(topic_paths(config.lake_path, topic).table).to_pyarrow_table()
    assert table.column("key").to_pylist() == [b"stays"]
    result = audit_key(config, topic, b"user-4711")
    assert result.traces == [] and result.status(int(time.time() * 1000)) == "erased"
