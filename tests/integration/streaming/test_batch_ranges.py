"""A micro-batch's offset ranges planned on the driver from Spark's plan, against running the
ranges DataFrame (the slow path it replaces and falls back to)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from compactor.demo.workload import Record, produce
from streaming.batch_ranges import BatchRanges
from streaming.kafka_source import SHORT_NAME


def _run(spark: Any, options: dict[str, str], name: str, planner: BatchRanges,
         checkpoint: str) -> list[tuple[bool, list[Any], list[Any]]]:
    """For each batch: whether the plan had its offsets, the ranges given, the rows run."""
    seen: list[tuple[bool, list[Any], list[Any]]] = []

    def each(df: Any, batch_id: int) -> None:
        from_plan = planner._planned_offsets(batch_id) is not None
        ranges = sorted(planner.ranges(df, batch_id))
        rows = sorted((r.topic, r.partition, r.startOffset, r.endOffset) for r in df.collect())
        seen.append((from_plan, ranges, rows))

    query = (spark.readStream.format(SHORT_NAME).options(**options).load()
             .writeStream.foreachBatch(each).queryName(name)
             .option("checkpointLocation", checkpoint).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        planner.close()
    return seen


def _options(broker: Any, topic: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic,
            "startingOffsets": "earliest", "compactor.ranges": "true",
            "maxOffsetsPerTrigger": "15"}


def _produce(broker: Any, topic: str) -> None:
    now_ms = int(time.time() * 1000)  # recent: a delete topic's retention would drop old records
    produce(broker.bootstrap_servers, topic,
            [Record(f"k{i}".encode(), b"v", i % 2, now_ms + i) for i in range(60)])


def test_each_batch_gets_the_ranges_spark_planned_without_running_them(
        spark, broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(2)
    _produce(broker, topic)
    name = f"ranges-{uuid.uuid4().hex[:8]}"
    options = _options(broker, topic)
    seen = _run(spark, options, name, BatchRanges(spark, name, options), str(tmp_path / "cp"))

    assert len(seen) >= 4  # 60 records at most 15 a batch
    for from_plan, ranges, rows in seen:
        assert from_plan
        assert ranges == rows
    covered = sorted((p, s, e) for _, ranges, _ in seen for _, p, s, e in ranges)
    for partition in (0, 1):  # consecutive, from the log start to its end, no gap or overlap
        spans = [(s, e) for p, s, e in covered if p == partition]
        assert spans[0][0] == 0 and spans[-1][1] == 30
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_a_plan_without_the_offsets_falls_back_to_running_the_ranges(
        spark, broker, topic_factory, tmp_path, caplog) -> None:
    topic = topic_factory(2)
    _produce(broker, topic)
    name = f"ranges-{uuid.uuid4().hex[:8]}"
    options = _options(broker, topic)
    # Looking for another query's plan finds none: the batch's ranges are collected instead.
    planner = BatchRanges(spark, f"not-{name}", options)
    with caplog.at_level(logging.WARNING, logger="streaming.batch_ranges"):
        seen = _run(spark, options, name, planner, str(tmp_path / "cp"))

    assert len(seen) >= 4
    for from_plan, ranges, rows in seen:
        assert not from_plan
        assert ranges == rows
    warnings = [r for r in caplog.records if r.name == "streaming.batch_ranges"]
    assert len(warnings) == 1 and "running the batch's range DataFrame" in warnings[0].getMessage()


def test_offsets_longer_than_one_py4j_answer_are_read_whole(spark) -> None:
    from streaming.batch_ranges import _PIECE, _offset_json, _text

    # 1,000 partitions of two topics: the JSON spans many pieces, and a piece boundary
    # falls inside names and numbers.
    wanted = {f"orders-{t}": {str(p): p * 7919 for p in range(1000)} for t in range(2)}
    text = json.dumps(wanted)
    assert len(text) > 5 * _PIECE
    jvm = spark.sparkContext._jvm
    # The offset class of a Python streaming source, as Spark's plan holds it.
    offset = jvm.org.apache.spark.sql.execution.datasources.v2.python \
        .PythonStreamingSourceOffset(text)
    assert _text(jvm, offset) == text  # read in pieces, not through json()'s one answer
    assert _offset_json(jvm, offset) == wanted
