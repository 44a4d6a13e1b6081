"""The mirror against a real broker, real Spark and real Delta files."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow.compute as pc
import pytest

from compactor.demo.workload import Record, produce
from compactor.lake.segments import SegmentRoller, record_sizes
from tests.integration.helpers import log_table, log_version, rejected_table, run_once

# A day old: inside the default retention that Kafka applies to the delete-policy source below.
BASE_MS = (int(time.time()) // 3600 - 24) * 3_600_000


def _records(partitions: int = 3, per_partition: int = 40) -> list[Record]:
    out = []
    for i in range(per_partition * partitions):
        p = i % partitions
        key = None if i == 17 else f"k{i % 11}".encode()
        value = None if i % 9 == 4 else f"value-{i}".encode() * (1 + i % 3)
        headers = (("trace", f"t{i}".encode()), ("empty", None)) if i % 2 == 0 else ()
        out.append(Record(key, value, p, BASE_MS + i * 7, headers))
    return out


@pytest.mark.usefixtures("spark")
def test_every_record_is_mirrored_exactly_and_a_second_run_adds_nothing(
        broker, topic_factory, lake_config) -> None:
    # Kafka refuses null keys on a compacted topic, but a topic made compact after it took them
    # holds them: the broker's topic stays delete, the mirror is told it is compact.
    topic = topic_factory(3, {"cleanup.policy": "delete", "segment.bytes": "400"})
    records = _records()
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic, log_cleaner_enable="false",
                         **{f"topic.{topic}.cleanup.policy": "compact"})

    summary = run_once(config)

    keyed = [r for r in records if r.key is not None]
    assert summary.ingest.records == len(keyed) and summary.ingest.rejected == 1
    table = log_table(config, topic)
    assert table.num_rows == len(keyed)
    by_partition: dict[int, list[Record]] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    expected = []
    for p, recs in sorted(by_partition.items()):
        for offset, r in enumerate(recs):
            if r.key is not None:
                expected.append((p, offset, r))
    for row, (p, offset, r) in zip(table.to_pylist(), expected, strict=True):
        assert (row["partition"], row["offset"]) == (p, offset)
        assert (row["key"], row["value"]) == (r.key, r.value)
        assert row["topic"] == topic
        assert row["timestamp"] == dt.datetime.fromtimestamp(
            r.timestamp_ms / 1000, tz=dt.UTC)
        assert row["timestampType"] == 0
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(r.headers)
        assert row["deleteHorizonMs"] is None

    rejected = rejected_table(config, topic).to_pylist()
    assert len(rejected) == 1
    assert rejected[0]["key"] is None and rejected[0]["value"] == records[17].value
    assert rejected[0]["offset"] == 17 // 3 and rejected[0]["partition"] == 17 % 3
    assert "null key" in rejected[0]["reason"]

    version = log_version(config, topic)
    again = run_once(config)
    assert again.ingest.records == 0
    # One commit only: the new run's writer claim (compactor.lake.fencing), without data.
    assert log_version(config, topic) == version + 1
    assert log_table(config, topic).num_rows == len(keyed)


@pytest.mark.usefixtures("spark")
def test_segments_roll_exactly_as_kafkas_rules_say(broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "300",
                              "segment.ms": "60000", "max.compaction.lag.ms": "5000"})
    # Timestamps jump by 6 s every 25 records: KIP-354 rolls at min(segment.ms, max lag).
    # They lie a minute ahead, so no segment's deadline passes by the wall clock between the
    # two runs (that roll is tested below).
    start = int(time.time() * 1000) + 60_000
    records = [Record(b"k%d" % (i % 7), b"x" * (5 + i % 13), 0, start + (i // 25) * 6000 + i)
               for i in range(120)]
    produce(broker.bootstrap_servers, topic, records[:70])
    config = lake_config(topic, log_cleaner_enable="false")
    run_once(config)
    produce(broker.bootstrap_servers, topic, records[70:])
    run_once(config)

    table = log_table(config, topic)
    sizes = record_sizes(table.drop_columns(["segment", "deleteHorizonMs"]).combine_chunks()
                         .to_batches()[0])
    millis = pc.divide(table.column("timestamp").cast("int64"), 1000).to_pylist()
    # The lake's segments equal the rules applied to the whole stream in one go: segment
    # boundaries do not depend on how the stream was cut into micro-batches.
    expected = SegmentRoller(None, 300, 5000).assign(
        table.column("offset").to_pylist(), millis, sizes)
    assert table.column("segment").to_pylist() == expected
    assert len(set(expected)) > 5


@pytest.mark.usefixtures("spark")
def test_an_idle_active_segment_rolls_at_its_deadline(broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"segment.ms": "1500"})
    config = lake_config(topic, log_cleaner_enable="false")
    produce(broker.bootstrap_servers, topic, [Record(b"a", b"1", 0), Record(b"b", b"2", 0)])
    run_once(config)
    first = log_table(config, topic)
    first_ms = min(pc.divide(first.column("timestamp").cast("int64"), 1000).to_pylist())
    while time.time() * 1000 <= first_ms + 1500:
        time.sleep(0.05)  # the wall clock must pass the segment's computed deadline
    produce(broker.bootstrap_servers, topic, [Record(b"c", b"3", 0)])
    run_once(config)
    table = log_table(config, topic)
    assert table.column("segment").to_pylist() == [0, 0, 2]


@pytest.mark.usefixtures("spark")
def test_null_keys_stay_in_the_log_of_a_delete_policy_topic(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "delete"})
    produce(broker.bootstrap_servers, topic, [Record(None, b"no key", 0), Record(b"k", b"v", 0)])
    config = lake_config(topic, log_cleaner_enable="false")
    run_once(config)
    assert log_table(config, topic).column("key").to_pylist() == [None, b"k"]
    assert rejected_table(config, topic).num_rows == 0


def _stages(spark) -> dict[int, int]:
    """Every stage Spark ran so far, streaming queries' included: id -> its task count."""
    gateway = spark.sparkContext._gateway
    stages = spark.sparkContext._jsc.sc().statusStore().stageList(
        None, False, False, gateway.new_array(gateway.jvm.double, 0),
        gateway.jvm.java.util.ArrayList())
    return {s.stageId(): s.numTasks()
            for s in gateway.jvm.scala.jdk.javaapi.CollectionConverters.asJava(stages)}


def test_min_partitions_and_max_records_set_the_number_of_write_tasks(
        spark, broker, topic_factory, lake_config) -> None:
    """Spark's minPartitions and maxRecordsPerPartition for the mirror: more, smaller tasks
    than one per core, the records still exactly once."""
    runs = {}
    for option, value in (("min_partitions", "7"), ("max_records_per_partition", "25"),
                          (None, None)):
        topic = topic_factory(7, {"cleanup.policy": "delete"})
        produce(broker.bootstrap_servers, topic,
                [Record(b"k%d" % i, b"v%d" % i, i % 7, BASE_MS + i) for i in range(70)])
        config = lake_config(topic, **({option: value} if option else {}))
        before = _stages(spark)
        summary = run_once(config)
        assert summary.ingest.records == 70 and log_table(config, topic).num_rows == 70
        runs[option] = {n for i, n in _stages(spark).items() if i not in before}
    cores = spark.sparkContext.defaultParallelism
    assert 7 in runs["min_partitions"]
    # 7 ranges of 10 records, at most 25 a task: three tasks cannot hold them, four can.
    assert 4 in runs["max_records_per_partition"]
    assert max(runs[None]) == cores  # one task per core by default
