"""Where Apache Kafka says each partition's log starts and ends, as the mirror asks it."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from compactor.kafka.broker_offsets import OffsetReader


def _topic(admin: AdminClient, partitions: int) -> str:
    name = f"offsets-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(name, partitions, 1, config={"cleanup.policy": "delete"})])[
        name].result(30)
    return name


def _produce(servers: str, topic: str, per_partition: dict[int, int], stamp_ms: int) -> None:
    producer = Producer({"bootstrap.servers": servers, "log_level": 0})
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, key=b"k%d" % i, value=b"v", partition=partition,
                             timestamp=stamp_ms + i)
    assert producer.flush(30) == 0


def _partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def test_log_starts_ends_and_times_of_many_partitions_in_one_answer(kafka) -> None:
    """The log start after DeleteRecords, the high watermark, an offset by timestamp (and
    none past the newest record), for every partition at once."""
    servers = kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    topic = _topic(admin, 12)
    counts = {p: p + 1 for p in range(12)}
    now_ms = int(time.time() * 1000)  # recent: retention deletes records older than 7 days
    _produce(servers, topic, counts, now_ms)
    for future in admin.delete_records([TopicPartition(topic, p, 1) for p in (3, 7)]).values():
        future.result(30)
    reader = OffsetReader({"bootstrap.servers": servers})
    tps = [(topic, p) for p in range(12)]
    assert reader.offsets(tps, "earliest") == {
        (topic, p): 1 if p in (3, 7) else 0 for p in range(12)}
    assert reader.offsets(tps, "latest") == {(topic, p): counts[p] for p in range(12)}
    # Partition p's records carry times now_ms + i for i below p + 1.
    assert reader.offsets_for_times({(topic, p): now_ms + 2 for p in range(12)}) == {
        (topic, p): 2 if p >= 2 else None for p in range(12)}
    assert reader.offsets([], "latest") == {}


def test_the_end_stops_before_an_open_transaction_unless_read_uncommitted(kafka) -> None:
    servers = kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    topic = _topic(admin, 1)
    _produce(servers, topic, {0: 3}, int(time.time() * 1000))
    open_ = Producer({"bootstrap.servers": servers, "transactional.id": f"o-{uuid.uuid4()}",
                      "log_level": 0})
    open_.init_transactions(30)
    open_.begin_transaction()
    open_.produce(topic, key=b"o", value=b"v", partition=0)
    open_.flush(30)
    try:
        committed = OffsetReader({"bootstrap.servers": servers})
        uncommitted = OffsetReader({"bootstrap.servers": servers,
                                    "isolation.level": "read_uncommitted"})
        assert committed.offsets([(topic, 0)], "latest") == {(topic, 0): 3}
        assert uncommitted.offsets([(topic, 0)], "latest") == {(topic, 0): 4}
    finally:
        open_.abort_transaction(30)


def test_partitions_added_after_the_first_answer_are_found(kafka) -> None:
    """A reader that asked before partitions were added answers for the new ones too (it
    reads the topic's metadata again), as the mirror's planner must for a growing topic."""
    servers = kafka.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    topic = _topic(admin, 2)
    reader = OffsetReader({"bootstrap.servers": servers})
    assert reader.offsets([(topic, 0), (topic, 1)], "latest") == {(topic, 0): 0, (topic, 1): 0}
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    deadline = time.monotonic() + 30
    while _partition_count(admin, topic) < 5 and time.monotonic() < deadline:
        time.sleep(0.1)  # the broker serves the new partitions' metadata
    _produce(servers, topic, {4: 2}, int(time.time() * 1000))
    tps = [(topic, p) for p in range(5)]
    assert reader.offsets(tps, "latest") == {(topic, p): 2 if p == 4 else 0 for p in range(5)}
