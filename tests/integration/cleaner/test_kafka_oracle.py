"""Kafka's own cleaner as the oracle: what Apache Kafka keeps of a compacted topic, the mirror
keeps of its log, record for record.

Each example produces a generated workload (a small key space, updates, tombstones, headers,
explicit old, recent and future timestamps, several partitions) to a real Kafka topic with small
segments, ends every partition with a barrier record far in the future (it rolls a new
segment, so everything before it is cleanable on both sides), mirrors and cleans the topic
with the product (in-process: the write tasks' and the cleaner tasks' own code) while the
topic is not yet compacted, then turns on compaction on the topic, waits until Kafka's cleaner
has cleaned up to the barrier (its ``cleaner-offset-checkpoint``), reads back what Kafka kept
and compares (partition, offset, key, value, headers, timestamp) below the barrier.

``KAFKA_ORACLE_EXAMPLES`` sets how many examples run (50 by default; 500 for a release, with
``-m kafka_oracle``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from deltalake import DeltaTable
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compactor.cleaner.maintenance import LogMaintenance
from compactor.config import build_config, resolve_config
from compactor.ingest.writer import commit_ranges, plan_ranges
from compactor.kafka.broker_offsets import OffsetReader
from compactor.lake.layout import topic_paths
from streaming.consumer import write_range
from tests.conftest import wait_until

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)
BARRIER_MS = NOW_MS + 365 * DAY_MS  # past every workload timestamp by more than segment.ms
EXAMPLES = int(os.environ.get("KAFKA_ORACLE_EXAMPLES", "50"))
SEGMENT_BYTES = 1024  # Kafka's segments (internal.segment.bytes): several per example

Record = tuple[int, bytes, bytes | None, int, tuple[tuple[str, bytes], ...]]

_timestamps = st.one_of(
    st.integers(NOW_MS - 30 * DAY_MS, NOW_MS - DAY_MS),  # old
    st.integers(NOW_MS - 60_000, NOW_MS + 60_000),  # recent
    st.integers(NOW_MS + DAY_MS, NOW_MS + 30 * DAY_MS),  # ahead of the clock
)
_headers = st.lists(st.tuples(st.sampled_from(["h", "trace", "x"]),
                              st.binary(max_size=4)), max_size=2).map(tuple)


@st.composite
def workloads(draw: Any) -> tuple[int, list[Record]]:
    partitions = draw(st.integers(1, 3))
    keys = [b"k%d" % i for i in range(draw(st.integers(1, 8)))]
    records = draw(st.lists(st.tuples(
        st.integers(0, partitions - 1), st.sampled_from(keys),
        st.one_of(st.none(), st.binary(min_size=0, max_size=40)),  # None: a tombstone
        _timestamps, _headers), min_size=1, max_size=60))
    return partitions, records


def _produce(servers: str, topic: str, records: list[Record], partitions: int) -> None:
    # Kafka refuses a batch larger than the topic's segments: batches stay under SEGMENT_BYTES.
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": SEGMENT_BYTES // 2, "log_level": 0})
    failures: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    for partition, key, value, ts, headers in records:
        producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts,
                         headers=list(headers), on_delivery=delivered)
    producer.flush(60)
    for partition in range(partitions):  # the barrier: a new segment on both sides
        producer.produce(topic, value=b"barrier", key=b"barrier", partition=partition,
                         timestamp=BARRIER_MS, on_delivery=delivered)
    producer.flush(60)
    assert not failures, failures


def _cleaner_checkpoints(log_dir: Path, topic: str) -> dict[int, int]:
    """Kafka's cleaner checkpoint (first dirty offset) of each partition of ``topic``."""
    path = log_dir / "cleaner-offset-checkpoint"
    found: dict[int, int] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic:
            found[int(parts[1])] = int(parts[2])
    return found


def _kafka_kept(servers: str, topic: str, ends: dict[int, int]) -> list[tuple[Any, ...]]:
    """Every record Kafka still holds below each partition's barrier."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"oracle-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True, "log_level": 0})
    rows: list[tuple[Any, ...]] = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        open_parts = set(ends)
        deadline = time.monotonic() + 60
        while open_parts and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None:
                    continue
                partition = msg.partition()
                if msg.offset() >= ends[partition]:
                    open_parts.discard(partition)
                    continue
                rows.append((partition, msg.offset(), msg.key(), msg.value(),
                             [(k, v) for k, v in (msg.headers() or [])], msg.timestamp()[1]))
        assert not open_parts, f"did not reach the barrier of partitions {open_parts}"
    finally:
        consumer.close()
    return sorted(rows)


def _mirror_and_clean(servers: str, topic: str, lake: Path) -> list[tuple[Any, ...]]:
    """Mirror ``topic`` into ``lake`` and clean it until idle, in this process; the log's rows."""
    config = resolve_config(build_config({
        "bootstrap.servers": servers, "topics": topic, "lake.path": str(lake),
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
        f"topic.{topic}.segment.bytes": "200",
        "delete.retention.ms": str(DAY_MS), "log.cleaner.backoff.ms": "0"}))
    reader = OffsetReader(config.kafka_client_config())
    tps = [(t, p) for t, p in reader.partitions([topic], None)]
    ends = reader.offsets(tps, "latest")
    plans = plan_ranges(config, [(t, p, 0, ends[(t, p)]) for t, p in tps], NOW_MS,
                        lambda asked: reader.offsets(asked, "earliest"))
    client = config.kafka_client_config()
    commit_ranges(config, [write_range(plan, client, 60_000, True) for plan in plans])
    LogMaintenance(None, config, threading.Lock()).run_until_idle()
    table = DeltaTable(topic_paths(config.lake_path, topic).log).to_pyarrow_table(
        columns=["partition", "offset", "key", "value", "headers", "timestamp"])
    return sorted(
        (r["partition"], r["offset"], r["key"], r["value"],
         [(h["key"], h["value"]) for h in (r["headers"] or [])],
         int(r["timestamp"].timestamp() * 1000))
        for r in table.to_pylist())


@pytest.mark.kafka_oracle
@pytest.mark.timeout(max(600, EXAMPLES * 6))  # the whole run of examples, not one
@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(workload=workloads())
@example(workload=(2, [(0, b"k0", b"a", NOW_MS, ()), (1, b"k1", b"b", NOW_MS, ()),
                       (0, b"k0", None, NOW_MS, ()), (0, b"k0", b"c", NOW_MS - DAY_MS, ())]))
def test_the_mirror_keeps_what_kafkas_cleaner_keeps(kafka, tmp_path_factory,
                                                    workload: tuple[int, list[Record]]) -> None:
    partitions, records = workload
    topic = f"oracle-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    # Not compacted until the mirror has read it: Kafka's cleaner must not clean first.
    admin.create_topics([NewTopic(topic, partitions, 1, config={
        "cleanup.policy": "delete", "retention.ms": "-1",
        "internal.segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(DAY_MS),
        "min.compaction.lag.ms": "0"})])[topic].result(30)
    _produce(kafka.bootstrap_servers, topic, records, partitions)
    reader = OffsetReader({"bootstrap.servers": kafka.bootstrap_servers})
    barriers = {p: o - 1 for (_, p), o in
                reader.offsets([(topic, p) for p in range(partitions)], "latest").items()}
    mirrored = [r for r in _mirror_and_clean(kafka.bootstrap_servers, topic,
                                             tmp_path_factory.mktemp("lake"))
                if r[1] < barriers[r[0]]]

    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    dirty = {p: b for p, b in barriers.items() if b > 0}  # a partition of the barrier alone
    wait_until(lambda: _cleaner_checkpoints(kafka.log_dir, topic) == dirty, 30,
               f"Kafka's cleaner to clean {topic} up to its barriers {dirty}")
    assert mirrored == _kafka_kept(kafka.bootstrap_servers, topic, barriers)
    admin.delete_topics([topic])[topic].result(30)
