"""Bootstrap from the lake, then tail Kafka: the same state as reading the topic from offset 0."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from compactor.demo.workload import Record, partition_for, produce
from compactor.exceptions import LakeError
from compactor.lake.bootstrap import open_latest, open_log
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import running

State = dict[bytes, bytes]


def changes(rng: random.Random, n: int, keys: int, partitions: int) -> list[Record]:
    """Skewed updates with some tombstones: a topic compaction has work on."""
    out = []
    for _ in range(n):
        key = b"user-%d" % min(keys - 1, int(rng.paretovariate(1.1)) - 1 + rng.randrange(keys))
        value = None if rng.random() < 0.05 else b"v%d" % rng.randrange(10**9)
        out.append(Record(key, value, partition_for(key, partitions)))
    return out


def apply(state: State, key: bytes | None, value: bytes | None) -> None:
    if key is None:
        return
    if value is None:
        state.pop(key, None)
    else:
        state[key] = value


def tail(consumer: Any, ends: dict[int, int], state: State, timeout_s: float = 60) -> int:
    """Consume until every partition reached ``ends``; returns how many records arrived."""
    positions = {tp.partition: tp.offset for tp in consumer.assignment()}
    seen = 0
    deadline = time.monotonic() + timeout_s

    def behind() -> list[int]:
        return [p for p, end in ends.items()
                if positions.get(p, OFFSET_BEGINNING) < end]

    while behind():
        assert time.monotonic() < deadline, f"tail stuck at {positions}, ends {ends}"
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        apply(state, msg.key(), msg.value())
        positions[msg.partition()] = msg.offset() + 1
        seen += 1
    return seen


def from_kafka(bootstrap: str, topic: str, ends: dict[int, int]) -> State:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "full-read",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    state: State = {}
    try:
        tail(consumer, ends, state)
    finally:
        consumer.close()
    return state


def ends_of(records: list[Record], partitions: int) -> dict[int, int]:
    counts = dict.fromkeys(range(partitions), 0)
    for r in records:
        counts[r.partition] += 1
    return counts


def bootstrap(snapshot: Any, bootstrap_servers: str, ends: dict[int, int]) -> tuple[State, int]:
    """Replay the snapshot, then tail Kafka from where it ends."""
    state: State = {}
    for batch in snapshot.batches():
        for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                              strict=True):
            apply(state, key, value)
    consumer = snapshot.consumer(bootstrap_servers)
    try:
        tailed = tail(consumer, ends, state)
    finally:
        consumer.close()
    return state, tailed


@pytest.mark.usefixtures("spark")
def test_bootstrap_then_tail_equals_reading_the_topic(broker, topic_factory, lake_config) -> None:
    topic = topic_factory(3, {"cleanup.policy": "compact", "segment.bytes": "2000",
                              "min.cleanable.dirty.ratio": "0.1"})
    rng = random.Random(5)
    mirrored = changes(rng, 3000, 300, 3)
    produce(broker.bootstrap_servers, topic, mirrored)
    config = lake_config(topic)
    summary = Service(config).run(once=True)
    assert summary.cleaning.records_dropped > 0  # the snapshot is a compacted log
    later = changes(rng, 500, 300, 3)
    produce(broker.bootstrap_servers, topic, later)
    ends = ends_of(mirrored + later, 3)

    snap = open_log(config.lake_path, topic)
    assert snap.next_offsets == ends_of(mirrored, 3)
    assert snap.read().num_rows < len(mirrored)
    state, tailed = bootstrap(snap, broker.bootstrap_servers, ends)
    assert tailed == len(later)  # the tail starts exactly where the snapshot ends
    assert state == from_kafka(broker.bootstrap_servers, topic, ends)

    latest = open_latest(config.lake_path, topic)
    assert latest.next_offsets == snap.next_offsets
    table_state = dict(zip(latest.table.column("key").to_pylist(),
                           latest.table.column("value").to_pylist(), strict=True))
    consumer = latest.consumer(broker.bootstrap_servers)
    try:
        tail(consumer, ends, table_state)
    finally:
        consumer.close()
    assert table_state == state

    # Seeking: an offset compaction removed starts at the next record that exists.
    rows = snap.read()
    p0 = [o for p, o in zip(rows.column("partition").to_pylist(),
                            rows.column("offset").to_pylist(), strict=True) if p == 0]
    gap = next(o for o in range(p0[0], p0[-1]) if o not in set(p0))
    first = next(iter(snap.batches({0: gap}, partitions=[0])))
    assert first.column("offset")[0].as_py() == min(o for o in p0 if o > gap)
    below = next(iter(snap.batches({0: 0}, partitions=[0])))
    assert below.column("offset")[0].as_py() == p0[0]


def mirrored_upto(lake: str, topic: str) -> dict[int, int] | None:
    try:
        return open_log(lake, topic).next_offsets
    except LakeError:  # not created yet
        return None


@pytest.mark.slow
def test_bootstrap_while_the_mirror_runs_and_compacts(broker, topic_factory,
                                                       lake_config) -> None:
    topic = topic_factory(3, {"cleanup.policy": "compact", "segment.bytes": "1500",
                              "min.cleanable.dirty.ratio": "0.05",
                              "delete.retention.ms": "2000"})
    config = lake_config(topic, trigger_interval_ms="300", log_cleaner_backoff_ms="500")
    rng = random.Random(9)
    produced: list[Record] = []
    snapshots: list[Any] = []

    def cleaned_upto() -> set[int | None]:
        return {s.partitions[0].cleaner_offset for s in snapshots}

    # At least six snapshots, and on until they span cleaner commits: how many rounds one
    # cleaning pass takes depends on the machine's load.
    deadline = time.monotonic() + 180
    with running(Service(config)) as failures:
        while len(snapshots) < 6 or len(cleaned_upto()) < 2:
            assert time.monotonic() < deadline, f"no cleaner commit between {cleaned_upto()}"
            chunk = changes(rng, 600, 200, 3)
            produce(broker.bootstrap_servers, topic, chunk)
            produced += chunk
            mirrored = ends_of(produced, 3)
            wait_until(lambda m=mirrored: mirrored_upto(config.lake_path, topic) == m,
                       120, "the mirror to catch up")
            snapshots.append(open_log(config.lake_path, topic))
    assert not failures, failures
    ends = ends_of(produced, 3)
    expected = from_kafka(broker.bootstrap_servers, topic, ends)
    for snap in snapshots:
        state, _ = bootstrap(snap, broker.bootstrap_servers, ends)
        assert state == expected, f"bootstrap from version {snap.version} differs"


def test_read_cli_prints_records_and_refuses_what_does_not_fit(
        broker, topic_factory, lake_config, tmp_path, spark) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    now = int(time.time() * 1000)  # recent: the segment stays active, nothing is cleaned
    produce(broker.bootstrap_servers, topic, [
        Record(b"a", b'{"n":1}', 0, now, (("h", b"x"),)),
        Record(b"\xff\xfe", b"raw", 0, now + 1),
        Record(b"a", None, 0, now + 2)])
    config = lake_config(topic)
    Service(config).run(once=True)
    conf = tmp_path / "c.properties"
    conf.write_text(f"bootstrap.servers={broker.bootstrap_servers}\ntopics={topic}\n"
                    f"lake.path={config.lake_path}\n")

    def read(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "compactor.cli", "read", "--config",
                               str(conf), "--topic", topic, *args], capture_output=True,
                              text=True, timeout=120)

    out = read("--key-format", "hex")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (0, "61", '{"n":1}'), (1, "fffe", "raw"), (2, "61", None)]
    assert rows[0]["timestamp_ms"] == now and rows[0]["headers"] == [["h", "x"]]
    assert "next offsets to consume from Kafka: 0:3" in out.stderr

    tail_only = read("--key-format", "base64", "--from-offset", "0:2", "--format", "csv")
    assert tail_only.stdout.splitlines() == [
        "partition,offset,timestamp_ms,key,value,headers", f"0,2,{now + 2},YQ==,,"]

    bad = read()  # key bytes ff fe are not UTF-8
    assert bad.returncode == 2
    assert "partition 0 offset 1: the key is not UTF-8" in bad.stderr
    assert "--key-format hex or base64" in bad.stderr
    wrong = read("--from-offset", "0=5")
    assert wrong.returncode == 2 and "must be PARTITION:OFFSET" in wrong.stderr


def test_a_snapshot_whose_file_was_vacuumed_says_so(tmp_path) -> None:
    """A read that outlives vacuum.grace.ms fails with a message naming the cause and the fix."""
    from pathlib import Path

    from tests.lake import append, offline_config

    config = offline_config(str(tmp_path / "lake"), "users")
    now = int(time.time() * 1000)
    append(config, "users", 0, [(o, b"k%d" % o, b"v", now) for o in range(5)], now)
    snap = open_log(config.lake_path, "users")
    assert snap.read().num_rows == 5
    for f in Path(snap.log_uri).glob("partition=0/**/*.parquet"):
        f.unlink()  # what vacuum does once a newer version replaced the file
    with pytest.raises(LakeError, match="was vacuumed.*open a new snapshot"):
        snap.read()
