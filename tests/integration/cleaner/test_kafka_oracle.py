"""Kafka's own cleaner as the oracle: what Apache Kafka keeps of a compacted topic, the mirror
keeps of its log, record for record.

Each example produces a generated workload to a real Kafka topic with small segments: a small
key space, updates, tombstones, headers, explicit old, recent and future timestamps, several
partitions, groups of records sent in transactions that commit or abort, and for policy
``compact,delete`` a prefix of records past ``retention.ms``. Every partition ends with a
barrier record far in the future (it rolls a new segment, so everything before it is cleanable
on both sides). The product mirrors and cleans the topic in this process (the write tasks' and
the cleaner tasks' own code) while Kafka's copy is still a plain log. Then Kafka's retention is
turned on and the test waits for its log start offsets, then compaction, and the test waits
until Kafka's cleaner has cleaned up to the barrier (its ``cleaner-offset-checkpoint``). What a
``read_committed`` consumer reads back from Kafka below the barrier must equal the mirror's log
there: (partition, offset, key, value, headers, timestamp). Aborted records are, in addition,
checked to be absent from the mirror by offset.

Retention is applied before compaction on Kafka's side because Kafka's cleaner may merge an
expired segment with a live one (it groups small segments), after which Kafka's own outcome
depends on which of its threads ran first. The expired prefix is flushed on its own and its
timestamps lie more than ``segment.ms`` before the rest, so both sides roll a segment there.

``KAFKA_ORACLE_EXAMPLES`` sets how many examples run (50 by default; 500 for a release, with
``-m kafka_oracle``).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
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
from tests.integration.helpers import alter_topic

DAY_MS = 86_400_000
NOW_MS = int(time.time() * 1000)
BARRIER_MS = NOW_MS + 365 * DAY_MS  # past every workload timestamp by more than segment.ms
RETENTION_MS = 40 * DAY_MS  # past the expired prefix, short of every other record
EXAMPLES = int(os.environ.get("KAFKA_ORACLE_EXAMPLES", "50"))
SEGMENT_BYTES = 1024  # Kafka's segments (internal.segment.bytes): several per example

Record = tuple[int, bytes, bytes | None, int, tuple[tuple[str, bytes], ...]]


@dataclass(frozen=True)
class Workload:
    """Records to produce: ``expired`` first (flushed on its own), then each group, sent
    plainly or in one transaction that commits or aborts."""

    policy: str
    partitions: int
    expired: list[Record]
    groups: list[tuple[str, list[Record]]]  # ("plain" | "commit" | "abort", records)


_timestamps = st.one_of(
    st.integers(NOW_MS - 30 * DAY_MS, NOW_MS - DAY_MS),  # old
    st.integers(NOW_MS - 60_000, NOW_MS + 60_000),  # recent
    st.integers(NOW_MS + DAY_MS, NOW_MS + 30 * DAY_MS),  # ahead of the clock
)
_expired_timestamps = st.integers(NOW_MS - 60 * DAY_MS, NOW_MS - 50 * DAY_MS)
_headers = st.lists(st.tuples(st.sampled_from(["h", "trace", "x"]),
                              st.binary(max_size=4)), max_size=2).map(tuple)


@st.composite
def workloads(draw: Any) -> Workload:
    partitions = draw(st.integers(1, 3))
    keys = [b"k%d" % i for i in range(draw(st.integers(1, 8)))]

    def records(timestamps: Any, max_size: int) -> Any:
        return st.lists(st.tuples(
            st.integers(0, partitions - 1), st.sampled_from(keys),
            st.one_of(st.none(), st.binary(min_size=0, max_size=40)),  # None: a tombstone
            timestamps, _headers), min_size=1, max_size=max_size)

    policy = draw(st.sampled_from(["compact", "compact,delete"]))
    expired = (draw(st.one_of(st.just([]), records(_expired_timestamps, 12)))
               if policy == "compact,delete" else [])
    groups = draw(st.lists(st.tuples(st.sampled_from(["plain", "plain", "commit", "abort"]),
                                     records(_timestamps, 20)), min_size=1, max_size=5))
    return Workload(policy, partitions, expired, groups)


@dataclass
class Produced:
    """Offsets Kafka gave: the barrier, the first record after the expired prefix and every
    aborted record, by partition."""

    barriers: dict[int, int] = field(default_factory=dict)
    first_live: dict[int, int] = field(default_factory=dict)
    aborted: set[tuple[int, int]] = field(default_factory=set)


def _produce(servers: str, topic: str, workload: Workload) -> Produced:
    # Kafka refuses a batch larger than the topic's segments: batches stay under SEGMENT_BYTES.
    common = {"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5,
              "batch.size": SEGMENT_BYTES // 2, "log_level": 0}
    plain = Producer(common)
    transactional = Producer({**common, "transactional.id": f"oracle-{uuid.uuid4().hex}"})
    transactional.init_transactions(30)
    failures: list[Any] = []
    delivered: list[tuple[int, int]] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            delivered.append((msg.partition(), msg.offset()))

    def send(producer: Any, records: list[Record]) -> list[tuple[int, int]]:
        before = len(delivered)
        for partition, key, value, ts, headers in records:
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts,
                             headers=list(headers), on_delivery=report)
        producer.flush(60)
        return delivered[before:]

    produced = Produced()
    send(plain, workload.expired)  # alone in its batches: the segment rolls after it
    for mode, records in workload.groups:
        if mode == "plain":
            offsets = send(plain, records)
        else:
            transactional.begin_transaction()
            offsets = send(transactional, records)
            if mode == "commit":
                transactional.commit_transaction(30)
            else:
                transactional.abort_transaction(30)
                produced.aborted.update(offsets)
        for partition, offset in offsets:
            produced.first_live.setdefault(partition, offset)
    barrier: list[Record] = [(p, b"barrier", b"barrier", BARRIER_MS, ())
                             for p in range(workload.partitions)]
    for partition, offset in send(plain, barrier):  # the barrier: a new segment on both sides
        produced.barriers[partition] = offset
        produced.first_live.setdefault(partition, offset)
    assert not failures, failures
    return produced


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
                         "enable.partition.eof": True, "isolation.level": "read_committed",
                         "log_level": 0})
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


def _mirror_and_clean(servers: str, topic: str, lake: Path,
                      policy: str) -> list[tuple[Any, ...]]:
    """Mirror ``topic`` into ``lake`` and clean it until idle, in this process; the log's rows."""
    config = resolve_config(build_config({
        "bootstrap.servers": servers, "topics": topic, "lake.path": str(lake),
        "cleanup.policy": policy, "retention.ms": str(RETENTION_MS),
        "min.cleanable.dirty.ratio": "0.01",
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
@pytest.mark.timeout(max(600, EXAMPLES * 8))  # the whole run of examples, not one
@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(workload=workloads())
@example(workload=Workload("compact", 2, [], [("plain", [
    (0, b"k0", b"a", NOW_MS, ()), (1, b"k1", b"b", NOW_MS, ()),
    (0, b"k0", None, NOW_MS, ()), (0, b"k0", b"c", NOW_MS - DAY_MS, ())])]))
@example(workload=Workload("compact,delete", 1, [(0, b"k0", b"old", NOW_MS - 55 * DAY_MS, ())], [
    ("abort", [(0, b"k0", b"aborted", NOW_MS, ())]),
    ("commit", [(0, b"k1", b"committed", NOW_MS, ()), (0, b"k1", None, NOW_MS, ())])]))
def test_the_mirror_keeps_what_kafkas_cleaner_keeps(kafka, tmp_path_factory,
                                                    workload: Workload) -> None:
    topic = f"oracle-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    # Neither compacted nor retained until the mirror has read it: Kafka must not act first.
    admin.create_topics([NewTopic(topic, workload.partitions, 1, config={
        "cleanup.policy": "delete", "retention.ms": "-1",
        "internal.segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(DAY_MS),
        "min.compaction.lag.ms": "0"})])[topic].result(30)
    produced = _produce(kafka.bootstrap_servers, topic, workload)
    barriers = produced.barriers
    mirrored = [r for r in _mirror_and_clean(kafka.bootstrap_servers, topic,
                                             tmp_path_factory.mktemp("lake"), workload.policy)
                if r[1] < barriers[r[0]]]
    assert not {(r[0], r[1]) for r in mirrored} & produced.aborted

    starts = {p: 0 for p in barriers}
    if "delete" in workload.policy:
        alter_topic(kafka.bootstrap_servers, topic, {"retention.ms": str(RETENTION_MS)})
        starts = produced.first_live
        reader = OffsetReader({"bootstrap.servers": kafka.bootstrap_servers})
        wait_until(lambda: {p: o for (_, p), o in reader.offsets(
            [(topic, p) for p in barriers], "earliest").items()} == starts, 30,
            f"Kafka's retention to start {topic} at {starts}")
    alter_topic(kafka.bootstrap_servers, topic, {"cleanup.policy": workload.policy})
    dirty = {p: b for p, b in barriers.items() if starts[p] < b}  # not the barrier alone
    wait_until(lambda: _cleaner_checkpoints(kafka.log_dir, topic) == dirty, 30,
               f"Kafka's cleaner to clean {topic} up to its barriers {dirty}")
    assert mirrored == _kafka_kept(kafka.bootstrap_servers, topic, barriers)
    admin.delete_topics([topic])[topic].result(30)
