"""A Spark Python data source for Kafka, named ``pykafka``.

It has the output schema and option names of Spark's built-in ``kafka`` source, so switching
is one word where the jar exists::

    spark.dataSource.register(KafkaDataSource)
    df = (spark.readStream.format("pykafka")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "orders")
          .load())

Streaming and batch reads (``spark.read.format("pykafka")`` with ``startingOffsets`` and
``endingOffsets``). The options, with Spark's meanings, are in
:mod:`streaming.source_options`; an option of Spark's this source lacks is refused by name.
Partitions added while a streaming query runs start at their earliest offset.

The option ``compactor.ranges=true`` makes each row an offset range (topic, partition,
startOffset, endOffset) instead of a record: the mirror consumes inside its write tasks, so
records never cross into the JVM.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from compactor.exceptions import DataLossError
from compactor.kafka.broker_offsets import OffsetReader
from streaming.exceptions import KafkaSourceError
from streaming.offset_planning import (
    EARLIEST,
    LATEST,
    ByTimestamp,
    OffsetRange,
    Offsets,
    rate_limit,
    split_ranges,
    to_offsets,
)
from streaming.source_options import SHORT_NAME, SourceOptions

log = logging.getLogger(__name__)

__all__ = ["SHORT_NAME", "KafkaDataSource", "SourceOptions"]

KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"
RANGES_DDL = "topic string, partition int, startOffset long, endOffset long"
RANGES_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()),
    ("startOffset", pa.int64()), ("endOffset", pa.int64()),
])


class KafkaDataSource(DataSource):
    """Spark's Kafka source schema and options over confluent-kafka."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        opts = SourceOptions(self.options, streaming=None)  # load(): the checks common to both
        if opts.ranges_only:
            return RANGES_DDL
        return f"{KAFKA_DDL}, {HEADERS_DDL}" if opts.include_headers else KAFKA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(SourceOptions(self.options, streaming=False))


class _RangePartition(InputPartition):
    def __init__(self, r: OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r


class _Ranges:
    """What both readers share: the cluster, data-loss checks, and reading one range."""

    def __init__(self, options: SourceOptions) -> None:
        self._opts = options
        self._reader: OffsetReader | None = None

    @property
    def _offsets(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self._opts.client_config, retries=self._opts.fetch_retries,
                                        retry_interval_ms=self._opts.fetch_retry_interval_ms)
        return self._reader

    def _partitions(self) -> list[tuple[str, int]]:
        if self._opts.assigned is not None:
            return self._opts.assigned
        return self._offsets.partitions(self._opts.topics, self._opts.pattern)

    def _lost(self, message: str) -> None:
        if self._opts.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to skip them.")

    def _resolve(self, wanted: str | Offsets | ByTimestamp, tps: list[tuple[str, int]],
                 what: str) -> dict[tuple[str, int], int]:
        """Offsets named by ``startingOffsets``/``endingOffsets`` (or their timestamp
        options) for each partition."""
        if isinstance(wanted, ByTimestamp):
            return self._by_timestamp(wanted, tps, what)
        if isinstance(wanted, dict):  # as Spark: specific offsets name every partition
            missing = [f"{t}-{p}" for t, p in tps if str(p) not in wanted.get(t, {})]
            if missing:
                raise KafkaSourceError(
                    f"{what}={json.dumps(wanted)} leaves out {', '.join(missing)}: specific "
                    "offsets must name every subscribed partition (-2 = earliest, -1 = latest)")
        earliest = self._offsets.offsets(tps, "earliest")
        latest = self._offsets.offsets(tps, "latest")
        result: dict[tuple[str, int], int] = {}
        for tp in tps:
            if isinstance(wanted, dict):
                offset = wanted[tp[0]][str(tp[1])]
            else:
                offset = LATEST if wanted == "latest" else EARLIEST
            result[tp] = {EARLIEST: earliest[tp], LATEST: latest[tp]}.get(offset, offset)
        return result

    def _by_timestamp(self, wanted: ByTimestamp, tps: list[tuple[str, int]],
                      what: str) -> dict[tuple[str, int], int]:
        """As Spark's source: the broker's offset for each time; a partition with no record
        that recent starts per ``startingOffsetsByTimestampStrategy`` and ends at latest."""
        side = what.removesuffix("Offsets")  # "starting" or "ending"
        option = f"{side}Timestamp" if wanted.every is not None else f"{what}ByTimestamp"
        missing = [f"{t}-{p}" for t, p in tps if wanted.at(t, p) is None]
        if missing:
            raise KafkaSourceError(
                f"option {option} leaves out {', '.join(missing)}: timestamps by partition "
                "must name every subscribed partition")
        times = {tp: at for tp in tps if (at := wanted.at(*tp)) is not None}
        found = self._offsets.offsets_for_times(times)
        unmatched = [tp for tp in tps if found[tp] is None]
        if unmatched and side == "starting" and wanted.no_match == "error":
            named = ", ".join(f"{t}-{p} (timestamp {times[(t, p)]})" for t, p in unmatched)
            raise KafkaSourceError(
                f"option {option}: no record of {named} has a timestamp at or after the one "
                "asked; set startingOffsetsByTimestampStrategy=latest to start such a "
                "partition at its end")
        result = self._offsets.offsets(unmatched, "latest")
        for tp, offset in found.items():
            if offset is not None:
                result[tp] = offset
        return result

    def _planned(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        if not self._opts.ranges_only:  # the mirror writes one file set per Kafka partition
            ranges = split_ranges(ranges, self._opts.min_partitions,
                                  self._opts.max_records_per_partition)
        return [_RangePartition(r) for r in ranges if r.size > 0]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r: OffsetRange = partition.range  # type: ignore[attr-defined]
        if self._opts.ranges_only:
            yield pa.RecordBatch.from_pylist(
                [{"topic": r.topic, "partition": r.partition,
                  "startOffset": r.start, "endOffset": r.end}],
                schema=RANGES_SCHEMA,
            )
            return
        # Here, not at the top: the processes Spark starts to plan the source never read.
        from streaming.consumer import consume_range

        for batch in consume_range(
            self._opts.client_config, r.topic, r.partition, r.start, r.end,
            self._opts.poll_timeout_ms, self._opts.fail_on_data_loss, self._opts.include_headers,
        ):
            if not self._opts.include_headers:
                batch = batch.drop_columns(["headers"])
            yield batch


class KafkaBatchReader(_Ranges, DataSourceReader):
    """``spark.read``: the records between ``startingOffsets`` and ``endingOffsets``."""

    def partitions(self) -> Sequence[InputPartition]:
        tps = self._partitions()
        start = self._resolve(self._opts.starting, tps, "startingOffsets")
        end = self._resolve(self._opts.ending, tps, "endingOffsets")
        log_start = self._offsets.offsets(tps, "earliest")
        ranges = []
        for tp in tps:
            begin = start[tp]
            if begin < log_start[tp]:
                self._lost(f"offsets [{begin}, {log_start[tp]}) of {tp[0]}-{tp[1]} were "
                           "deleted from the broker (retention)")
                begin = log_start[tp]
            if end[tp] < begin:
                raise KafkaSourceError(f"{tp[0]}-{tp[1]}: endingOffsets {end[tp]} is before "
                                       f"startingOffsets {begin}")
            ranges.append(OffsetRange(tp[0], tp[1], begin, end[tp]))
        return self._planned(ranges)


class KafkaStreamReader(_Ranges, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; tasks consume them."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._target: Offsets | None = None
        self._last_trigger = time.monotonic()  # for minOffsetsPerTrigger / maxTriggerDelay

    def initialOffset(self) -> dict[str, Any]:
        tps = self._partitions()
        resolved = self._resolve(self._opts.starting, tps, "startingOffsets")
        result: Offsets = {}
        for (topic, part), offset in resolved.items():
            result.setdefault(topic, {})[str(part)] = offset
        return result

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._opts.max_offsets > 0:
            return ReadMaxRows(self._opts.max_offsets)
        return ReadAllAvailable()

    def _available(self, start: Offsets) -> list[OffsetRange]:
        tps = self._partitions()
        latest = self._offsets.offsets(tps, "latest")
        fresh = [tp for tp in tps if str(tp[1]) not in start.get(tp[0], {})]
        earliest = self._offsets.offsets(fresh, "earliest")
        ranges: list[OffsetRange] = []
        for tp in tps:
            topic, part = tp
            begin = start.get(topic, {}).get(str(part), earliest.get(tp, 0))
            end = latest[tp]
            if end < begin:
                # The log ends before where we stopped reading: the topic was deleted and
                # recreated (or truncated). Its old offsets are gone and the new ones mean
                # other records. The mirror (ranges) judges that against its lake.
                if not self._opts.ranges_only:
                    self._lost(f"{topic}-{part} ends at offset {end}, behind offset {begin} "
                               "already read: the topic was recreated or truncated")
                log.warning("restarting %s-%d at its earliest offset after data loss", *tp)
                begin = self._offsets.offsets([tp], "earliest")[tp]
            if self._target is not None:
                end = min(end, self._target.get(topic, {}).get(str(part), begin))
            ranges.append(OffsetRange(topic, part, begin, max(begin, end)))
        return ranges

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ranges = self._available(start)
        waiting = (time.monotonic() - self._last_trigger) * 1000 < self._opts.max_trigger_delay_ms
        if self._opts.min_offsets and self._target is None and waiting and sum(
                r.size for r in ranges) < self._opts.min_offsets:
            return start  # minOffsetsPerTrigger: wait for more, up to maxTriggerDelay
        if isinstance(limit, ReadMaxRows):
            ranges = rate_limit(ranges, limit.max_rows)
        # A topic no longer subscribed leaves the offsets: its partitions are not read again.
        result: Offsets = {t: dict(parts) for t, parts in start.items() if self._subscribed(t)}
        for topic, parts in to_offsets(ranges).items():
            result.setdefault(topic, {}).update(parts)
        if result != start:
            self._last_trigger = time.monotonic()
        return result

    def _subscribed(self, topic: str) -> bool:
        if self._opts.assigned is not None:
            return any(t == topic for t, _ in self._opts.assigned)
        if self._opts.pattern is not None:
            return re.fullmatch(self._opts.pattern, topic) is not None
        return topic in (self._opts.topics or ())

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._partitions()
        latest = self._offsets.offsets(tps, "latest")
        self._target = to_offsets([OffsetRange(t, p, 0, end) for (t, p), end in latest.items()])

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return self._planned(self.ranges(start, end))

    def ranges(self, start: Offsets, end: Offsets) -> list[OffsetRange]:
        """The ranges between two offsets of this source, each starting no earlier than the
        broker's log start (offsets deleted before they were read are data loss).

        With ``compactor.ranges`` the ranges are the offsets as Spark planned them: the mirror
        starts each at its lake's position and judges data loss against that.
        """
        planned = [
            (topic, int(part), start.get(topic, {}).get(part), stop)
            for topic, parts in end.items() for part, stop in parts.items()
        ]
        if self._opts.ranges_only and all(begin is not None for _, _, begin, _ in planned):
            return [OffsetRange(t, p, begin, stop) for t, p, begin, stop in planned
                    if begin is not None]
        log_start = self._offsets.offsets([(t, p) for t, p, _, _ in planned], "earliest")
        ranges: list[OffsetRange] = []
        for topic, part, begin, stop in planned:
            first = log_start[(topic, part)]
            if begin is not None and begin < first:
                self._lost(f"offsets [{begin}, {first}) of {topic}-{part} were deleted from "
                           "the broker before they were read (retention)")
            ranges.append(OffsetRange(topic, part, first if begin is None else max(begin, first),
                                      stop))
        return ranges

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: positions live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        self._reader = None
