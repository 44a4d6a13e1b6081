"""A micro-batch's offset ranges, planned on the driver from the offsets Spark chose for it.

The mirror's source yields one row per offset range, and the micro-batch used to run that DataFrame
(``df.collect()``) to learn them: a Spark job whose tasks start Python workers to yield four rows,
a large part of each micro-batch. Spark has already written the batch's start and end offsets into
the plan it hands to ``foreachBatch`` (and into its offset log, before the batch ran); the source's
own :meth:`~streaming.kafka_source.KafkaStreamReader.ranges` turns them into the same ranges on the
driver, with the same data-loss checks against the broker's log start.

The plan is reached through Py4J (``StreamExecution.lastExecution``), which is not a public
API: the node is matched by class name and its batch id must be the batch's, otherwise the
DataFrame is collected as before, so a Spark that moves it costs time, not correctness.

The offsets' JSON (tens of kilobytes over hundreds of partitions) is read from the JVM in
pieces of :data:`_PIECE` characters: Py4J writes a longer answer in two sends, and the second
waits for the acknowledgement of the first, which the Python side delays (Nagle's algorithm
against delayed ACKs, a fixed stall per answer whatever its size).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from streaming.kafka_source import KafkaStreamReader
from streaming.offset_planning import Offsets
from streaming.source_options import SourceOptions

log = logging.getLogger(__name__)

Range = tuple[str, int, int, int]  # topic, partition, first offset, end offset (exclusive)
_SCAN = "StreamingDataSourceV2ScanRelation"
_PIECE = 4000  # characters per Py4J answer: each fits one send (bench/README.md)


class BatchRanges:
    """The offset ranges of each micro-batch of one named query over the mirror's source."""

    def __init__(self, spark: SparkSession, query_name: str, options: Mapping[str, str]) -> None:
        self._spark = spark
        self._name = query_name
        self._planner = KafkaStreamReader(SourceOptions(options))
        self._execution: Any = None  # the query's JVM StreamExecution, found at the first batch
        self._warned = False

    def ranges(self, df: DataFrame, batch_id: int) -> list[Range]:
        offsets = self._planned_offsets(batch_id)
        if offsets is None:
            return [(r["topic"], int(r["partition"]), int(r["startOffset"]), int(r["endOffset"]))
                    for r in df.collect()]
        start, end = offsets
        return [(r.topic, r.partition, r.start, r.end) for r in self._planner.ranges(start, end)]

    def close(self) -> None:
        self._planner.stop()
        self._execution = None

    def _planned_offsets(self, batch_id: int) -> tuple[Offsets, Offsets] | None:
        """(start, end) offsets of this batch from Spark's plan, or None to collect instead."""
        from py4j.protocol import Py4JError

        try:
            for fresh in (False, True):  # a restarted query is a new StreamExecution
                if fresh or self._execution is None:
                    self._execution = self._find_execution()
                if self._execution is None:
                    break
                found = _scan_offsets(self._spark.sparkContext._jvm,
                                      self._execution.lastExecution().logical(), batch_id)
                if found is not None:
                    return found
        except (Py4JError, AttributeError, ValueError) as exc:
            self._warn(f"{type(exc).__name__}: {exc}")
            return None
        self._warn(f"no {_SCAN} for batch {batch_id} in the query's plan")
        return None

    def _find_execution(self) -> Any:
        for query in self._spark.streams.active:
            if query.name == self._name:
                return query._jsq.streamingQuery()
        return None

    def _warn(self, why: str) -> None:
        if not self._warned:  # once: the fallback is slower, not wrong
            log.warning("reading micro-batch offsets from Spark's plan failed (%s); running "
                        "the batch's range DataFrame instead", why)
            self._warned = True


def _scan_offsets(jvm: Any, plan: Any, batch_id: int) -> tuple[Offsets, Offsets] | None:
    """The start and end offsets of the single source scan in ``plan``, if it is this batch's."""
    batch = plan.batchId()
    if batch.isEmpty() or int(batch.get()) != batch_id:
        return None
    scans = []
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.getClass().getSimpleName() == _SCAN:
            scans.append(leaf)
    if len(scans) != 1:
        return None
    start, end = scans[0].startOffset(), scans[0].endOffset()
    if start.isEmpty() or end.isEmpty():
        return None
    return _offset_json(jvm, start.get()), _offset_json(jvm, end.get())


def _text(jvm: Any, obj: Any) -> str:
    """``obj.toString()`` of a JVM object, read in pieces that each fit one Py4J answer."""
    text = jvm.java.lang.StringBuilder().append(obj)  # held in the JVM: not sent back whole
    size = int(text.length())
    return "".join(text.substring(i, min(size, i + _PIECE)) for i in range(0, size, _PIECE))


def _offset_json(jvm: Any, offset: Any) -> Offsets:
    """A JVM ``Offset``'s JSON (its ``toString()`` is its ``json()``), read in pieces."""
    try:
        parsed = json.loads(_text(jvm, offset))
    except ValueError:  # a Spark whose offsets print otherwise: the one long answer
        parsed = None
    if not isinstance(parsed, dict):
        parsed = json.loads(offset.json())
    return parsed  # type: ignore[no-any-return]
