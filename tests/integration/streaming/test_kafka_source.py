"""The ``pykafka`` data source used directly, as in a user's own Spark job."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from compactor.demo.workload import Record, produce
from tests.conftest import wait_until


def _load(reader: Any, broker: Any, options: dict[str, str]) -> Any:
    reader = reader.format("pykafka").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _stream(spark: Any, broker: Any, **options: str) -> Any:
    return _load(spark.readStream, broker, options)


def test_schema_headers_and_admission_control(spark, broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(2)
    now_ms = int(time.time() * 1000)  # recent: a delete topic's retention would drop old records
    records = [Record(f"k{i}".encode(), None if i == 3 else f"v{i}".encode(), i % 2,
                      now_ms + i, (("h", b"x"), ("none", None)))
               for i in range(50)]
    produce(broker.bootstrap_servers, topic, records)
    df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest",
                 includeHeaders="true", maxOffsetsPerTrigger="10")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    batches: list[list[Any]] = []
    query = (df.writeStream.foreachBatch(lambda d, _id: batches.append(d.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    rows = [r for b in batches for r in b]
    assert sorted((r.key, r.value) for r in rows) == sorted((r.key, r.value) for r in records)
    assert all(len(b) <= 10 for b in batches) and len(batches) >= 5
    row = next(r for r in rows if r.key == b"k4")
    assert (row.partition, row.offset, row.topic) == (0, 2, topic)
    assert [(h.key, h.value) for h in row.headers] == [("h", b"x"), ("none", None)]


def test_pattern_subscription_picks_up_new_partitions(spark, broker, topic_factory,
                                                      tmp_path) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    first = topic_factory(1, name=f"{prefix}-a")
    produce(broker.bootstrap_servers, first, [Record(b"a", b"1", 0)])
    df = _stream(spark, broker, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    seen: list[Any] = []
    query = (df.writeStream.foreachBatch(lambda d, _id: seen.extend(d.collect()))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(seen) == 1, 60, "the first topic's record")
        second = topic_factory(2, name=f"{prefix}-b")
        produce(broker.bootstrap_servers, second,
                [Record(b"b", b"2", 0), Record(b"c", b"3", 1)])
        wait_until(lambda: len(seen) == 3, 60, "records of the topic created while running")
    finally:
        query.stop()
    assert sorted((r.topic, r.partition, r.offset) for r in seen) == [
        (first, 0, 0), (second, 0, 0), (second, 1, 0)]


def test_missing_options_fail_with_a_clear_message(spark) -> None:
    with pytest.raises(Exception, match="kafka.bootstrap.servers is required"):
        spark.readStream.format("pykafka").option("subscribe", "x").load()
    with pytest.raises(Exception, match="exactly one of the options assign, subscribe"):
        spark.readStream.format("pykafka").option("kafka.bootstrap.servers", "h:1").load()


def test_a_bad_option_fails_at_load_never_silently(spark, broker) -> None:
    with pytest.raises(Exception, match="option startingTimestamp='soon': must be a timestamp"):
        _stream(spark, broker, subscribe="x", startingTimestamp="soon")
    with pytest.raises(Exception, match="Kafka option kafka.auto.offset.reset='earliest'"):
        _stream(spark, broker, subscribe="x", **{"kafka.auto.offset.reset": "earliest"})


def _timed(broker: Any, topic: str) -> int:
    """Ten records a partition, 1 s apart in record time, in partitions 0 and 1; the first
    record's time."""
    first = int(time.time() * 1000) - 60_000
    produce(broker.bootstrap_servers, topic, [
        Record(b"k%d" % i, b"v%d" % i, p, first + i * 1000) for p in (0, 1) for i in range(10)])
    return first


def _drain(spark: Any, broker: Any, checkpoint: Path, **options: str) -> list[Any]:
    rows: list[Any] = []
    query = (_stream(spark, broker, **options).writeStream
             .foreachBatch(lambda d, _id: rows.extend(d.collect()))
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return rows


def test_a_stream_starts_at_the_first_record_of_a_timestamp(spark, kafka, kafka_topic,
                                                             tmp_path) -> None:
    topic = kafka_topic(2)
    first = _timed(kafka, topic)
    rows = _drain(spark, kafka, tmp_path / "a", subscribe=topic,
                  startingTimestamp=str(first + 6500), startingOffsets="earliest")
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in (0, 1) for o in range(7, 10)]
    # One time per partition; offsets named by startingOffsets lose to it, as in Spark.
    by_partition = f'{{"{topic}":{{"0":{first + 2000},"1":{first}}}}}'
    rows = _drain(spark, kafka, tmp_path / "b", subscribe=topic,
                  startingOffsetsByTimestamp=by_partition, startingOffsets="latest")
    assert sorted((r.partition, r.offset) for r in rows) == (
        [(0, o) for o in range(2, 10)] + [(1, o) for o in range(10)])


def test_a_time_no_record_reaches_fails_or_starts_at_the_end_by_the_strategy(
        spark, kafka, kafka_topic, tmp_path) -> None:
    topic = kafka_topic(2)
    first = _timed(kafka, topic)
    later = str(first + 3_600_000)
    with pytest.raises(Exception, match=rf"no record of {topic}-0 \(timestamp {later}\)"):
        _drain(spark, kafka, tmp_path / "a", subscribe=topic, startingTimestamp=later)
    rows: list[Any] = []
    query = (_stream(spark, kafka, subscribe=topic, startingTimestamp=later,
                     startingOffsetsByTimestampStrategy="latest").writeStream
             .foreachBatch(lambda d, _id: rows.extend(d.collect()))
             .option("checkpointLocation", str(tmp_path / "b"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None, 60, "the query to start")
        produce(kafka.bootstrap_servers, topic, [Record(b"new", b"x", 1)])
        wait_until(lambda: rows, 60, "the record produced after the start")
        assert [(r.partition, r.offset, r.key) for r in rows] == [(1, 10, b"new")]
    finally:
        query.stop()


def test_a_batch_read_between_two_times(spark, kafka, kafka_topic) -> None:
    topic = kafka_topic(2)
    first = _timed(kafka, topic)
    df = _read(spark, kafka, subscribe=topic, startingTimestamp=str(first + 2000),
               endingOffsetsByTimestamp=f'{{"{topic}":{{"0":{first + 5000},'
                                        f'"1":{first + 3_600_000}}}}}')
    # Ends are exclusive; an end no record reaches is the partition's end, as in Spark.
    assert sorted((r.partition, r.offset) for r in df.collect()) == (
        [(0, o) for o in range(2, 5)] + [(1, o) for o in range(2, 10)])
    with pytest.raises(Exception, match=f"option endingOffsetsByTimestamp leaves out {topic}-1"):
        _read(spark, kafka, subscribe=topic,
              endingOffsetsByTimestamp=f'{{"{topic}":{{"0":{first}}}}}').collect()


def test_starting_offsets_that_leave_out_a_partition_are_refused(spark, broker, topic_factory,
                                                                 tmp_path) -> None:
    topic = topic_factory(2)
    produce(broker.bootstrap_servers, topic, [Record(b"a", b"1", 0), Record(b"b", b"2", 1)])
    df = _stream(spark, broker, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":0}}}}')
    seen: list[Any] = []
    query = (df.writeStream.foreachBatch(lambda d, _id: seen.extend(d.collect()))
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        with pytest.raises(Exception, match=f"leaves out {topic}-1"):
            query.processAllAvailable()
    finally:
        query.stop()
    assert seen == []  # nothing was read from a half-specified start


def _read(spark: Any, broker: Any, **options: str) -> Any:
    return _load(spark.read, broker, options)


def test_batch_read_between_starting_and_ending_offsets(spark, broker, topic_factory) -> None:
    topic = topic_factory(2)
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v%d" % i, i % 2) for i in range(20)])
    df = _read(spark, broker, subscribe=topic,
               startingOffsets=f'{{"{topic}":{{"0":2,"1":-2}}}}',
               endingOffsets=f'{{"{topic}":{{"0":5,"1":-1}}}}')
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, 2), (0, 3), (0, 4)] + [(1, o) for o in range(10)]
    everything = _read(spark, broker, subscribe=topic)  # Spark's defaults: earliest to latest
    assert everything.count() == 20


def test_assign_reads_only_the_assigned_partitions(spark, broker, topic_factory) -> None:
    topic = topic_factory(3)
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v", i % 3) for i in range(30)])
    df = _read(spark, broker, assign=f'{{"{topic}":[0,2]}}')
    assert sorted({r.partition for r in df.collect()}) == [0, 2] and df.count() == 20


def test_min_partitions_and_max_records_per_partition_split_a_range(spark, broker,
                                                                    topic_factory) -> None:
    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", 0) for i in range(100)])
    split = _read(spark, broker, subscribe=topic, minPartitions="4")
    assert split.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in split.collect()) == list(range(100))  # each record once
    capped = _read(spark, broker, subscribe=topic, maxRecordsPerPartition="30")
    assert capped.rdd.getNumPartitions() == 4 and capped.count() == 100


def _batches(df: Any, checkpoint: Path) -> tuple[Any, list[tuple[float, int]]]:
    """A started query over ``df`` and its non-empty micro-batches: (when, records)."""
    batches: list[tuple[float, int]] = []

    def keep(d: Any, _id: int) -> None:
        count = d.count()
        if count:
            batches.append((time.monotonic(), count))

    query = (df.writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    return query, batches


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(spark, broker, topic_factory,
                                                                 tmp_path) -> None:
    held, enough = topic_factory(1), topic_factory(1)
    produce(broker.bootstrap_servers, held, [Record(b"k%d" % i, b"v", 0) for i in range(3)])
    started = time.monotonic()
    query, batches = _batches(_stream(spark, broker, subscribe=held, startingOffsets="earliest",
                                      minOffsetsPerTrigger="10", maxTriggerDelay="4s"),
                              tmp_path / "held")
    try:
        wait_until(lambda: batches, 60, "the first micro-batch")
        # 3 records < minOffsetsPerTrigger: held back until maxTriggerDelay passed.
        assert batches[0][1] == 3 and batches[0][0] - started >= 4
    finally:
        query.stop()
    # Enough records go at once: with an hour's delay, nothing else could release them.
    query, batches = _batches(_stream(spark, broker, subscribe=enough,
                                      startingOffsets="earliest", minOffsetsPerTrigger="10",
                                      maxTriggerDelay="1h"), tmp_path / "enough")
    try:
        produce(broker.bootstrap_servers, enough,
                [Record(b"m%d" % i, b"v", 0) for i in range(12)])
        wait_until(lambda: batches, 60, "a micro-batch of the 12 records")
        assert batches[0][1] >= 10
    finally:
        query.stop()


def test_fetch_offset_retries_are_spent_before_the_error(tmp_path) -> None:
    from compactor.exceptions import BrokerUnavailableError
    from compactor.kafka.broker_offsets import OffsetReader

    reader = OffsetReader({"bootstrap.servers": "127.0.0.1:1"}, timeout_s=0.5, retries=2,
                          retry_interval_ms=10)
    with pytest.raises(BrokerUnavailableError, match="after 3 attempts"):
        reader.offsets([("t", 0)], "latest")
