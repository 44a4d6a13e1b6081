"""A Spark Python data source for Kafka, named ``pykafka``.

It has the output schema and option names of Spark's built-in ``kafka`` source, so switching
is one word where the jar exists::

    spark.dataSource.register(KafkaDataSource)
    df = (spark.readStream.format("pykafka")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "orders")
          .load())

Options: ``kafka.bootstrap.servers`` (required); exactly one of ``subscribe`` (comma list) and
``subscribePattern`` (regex); ``startingOffsets`` (earliest | latest | JSON, default latest);
``maxOffsetsPerTrigger``; ``failOnDataLoss`` (default true); ``includeHeaders`` (default
false, as in Spark); ``kafkaConsumer.pollTimeoutMs`` (default 120000); any ``kafka.*``
option goes to confluent-kafka without the prefix; ``isolation.level`` defaults to
read_committed. Partitions added while the query runs start at their earliest offset.

The option ``compactor.ranges=true`` makes each row an offset range (topic, partition,
startOffset, endOffset) instead of a record: the mirror consumes inside its write tasks, so
records never cross into the JVM.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
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
from compactor.kafka.client_config import check_with_librdkafka, translate_java_keys
from compactor.kafka.offsets import OffsetReader
from streaming.consumer import consume_range, messages_to_batch
from streaming.exceptions import KafkaSourceError
from streaming.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Offsets,
    parse_starting_offsets,
    rate_limit,
    to_offsets,
)

log = logging.getLogger(__name__)

SHORT_NAME = "pykafka"
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


# Options of Spark's built-in source this one does not implement yet: refused by name at
# load(), never ignored (an ignored startingTimestamp would start at latest and skip data).
NOT_YET = {
    "assign": "list the topics with subscribe (or subscribePattern) instead",
    "startingtimestamp": "use startingOffsets",
    "startingoffsetsbytimestamp": "use startingOffsets",
    "startingoffsetsbytimestampstrategy": "use startingOffsets",
    "minoffsetspertrigger": "use maxOffsetsPerTrigger, or a longer trigger interval",
    "maxtriggerdelay": "use maxOffsetsPerTrigger, or a longer trigger interval",
    "minpartitions": "each Kafka partition is one task",
    "maxrecordsperpartition": "each Kafka partition is one task; use maxOffsetsPerTrigger",
    "groupidprefix": "no consumer group is joined; positions live in Spark's checkpoint",
    "fetchoffset.numretries": "offset requests are retried by the Kafka client itself",
    "fetchoffset.retryintervalms": "offset requests are retried by the Kafka client itself",
}
# Options Spark's source refuses in a streaming query, with its reason.
STREAMING_REFUSED = {
    "endingoffsets": "ending offset not valid in streaming queries",
    "endingoffsetsbytimestamp": "ending timestamp not valid in streaming queries",
}
# kafka.* settings that would break the source's guarantees (Spark refuses the first five).
CLIENT_REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets to earliest or latest: the "
    "query, not the consumer, decides where to read, so that no data is missed",
    "key.deserializer": "keys are bytes; decode them with DataFrame operations",
    "value.deserializer": "values are bytes; decode them with DataFrame operations",
    "enable.auto.commit": "positions live in Spark's checkpoint",
    "interceptor.classes": "interceptors can change records",
    "enable.partition.eof": "the source needs it to find the end of each range",
    "enable.auto.offset.store": "positions live in Spark's checkpoint",
}


def _refuse_unsupported(lower: Mapping[str, str], original: Mapping[str, str]) -> None:
    names = {k.lower(): k for k in original}
    for key, hint in NOT_YET.items():
        if key in lower:
            raise KafkaSourceError(
                f"option {names[key]}={lower[key]!r} is not supported by the {SHORT_NAME} source "
                f"(Spark's kafka source has it): {hint}")
    for key, reason in STREAMING_REFUSED.items():
        if key in lower:
            raise KafkaSourceError(f"option {names[key]}={lower[key]!r}: {reason}")
    for key, reason in CLIENT_REFUSED.items():
        if f"kafka.{key}" in lower:
            raise KafkaSourceError(
                f"Kafka option {names['kafka.' + key]}={lower['kafka.' + key]!r} is not "
                f"supported: {reason}")


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = str(options.get(name, str(default))).strip().lower()
    if value not in ("true", "false"):
        raise KafkaSourceError(f"option {name}={value!r}: must be true or false")
    return value == "true"


class SourceOptions:
    """The source's options, validated once; picklable, so it travels to tasks."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k): str(v) for k, v in options.items()}
        lower = {k.lower(): v for k, v in opts.items()}
        if "kafka.bootstrap.servers" not in lower:
            raise KafkaSourceError("option kafka.bootstrap.servers is required")
        _refuse_unsupported(lower, opts)
        subscribe, pattern = lower.get("subscribe"), lower.get("subscribepattern")
        if (subscribe is None) == (pattern is None):
            raise KafkaSourceError("give exactly one of the options subscribe, subscribePattern")
        self.topics = [t.strip() for t in subscribe.split(",") if t.strip()] if subscribe else None
        self.pattern = pattern
        self.client_config = translate_java_keys({
            k[len("kafka."):]: v for k, v in opts.items() if k.lower().startswith("kafka.")
        })
        self.client_config.setdefault("isolation.level", "read_committed")
        check_with_librdkafka(self.client_config)
        self.starting = parse_starting_offsets(lower.get("startingoffsets", "latest"))
        max_offsets = lower.get("maxoffsetspertrigger", "0")
        if not max_offsets.isdigit():
            raise KafkaSourceError(
                f"option maxOffsetsPerTrigger={max_offsets!r}: must be a positive whole number"
            )
        self.max_offsets = int(max_offsets)
        poll = lower.get("kafkaconsumer.polltimeoutms", "120000")
        if not poll.isdigit():
            raise KafkaSourceError(f"option kafkaConsumer.pollTimeoutMs={poll!r}: must be ms")
        self.poll_timeout_ms = int(poll)
        self.fail_on_data_loss = _flag(lower, "failondataloss", True)
        self.include_headers = _flag(lower, "includeheaders", False)
        self.ranges_only = _flag(lower, "compactor.ranges", False)


class KafkaDataSource(DataSource):
    """Spark's Kafka source schema and options over confluent-kafka."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        opts = SourceOptions(self.options)
        if opts.ranges_only:
            return RANGES_DDL
        return f"{KAFKA_DDL}, {HEADERS_DDL}" if opts.include_headers else KAFKA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions(self.options))


class _RangePartition(InputPartition):
    def __init__(self, r: OffsetRange) -> None:
        super().__init__((r.topic, r.partition, r.start, r.end))
        self.range = r


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; tasks consume them."""

    def __init__(self, options: SourceOptions) -> None:
        self._opts = options
        self._reader: OffsetReader | None = None
        self._target: Offsets | None = None

    @property
    def _offsets(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self._opts.client_config)
        return self._reader

    def _partitions(self) -> list[tuple[str, int]]:
        return self._offsets.partitions(self._opts.topics, self._opts.pattern)

    def initialOffset(self) -> dict[str, Any]:
        tps = self._partitions()
        starting = self._opts.starting
        if isinstance(starting, dict):  # as Spark: specific offsets name every partition
            missing = [f"{t}-{p}" for t, p in tps if str(p) not in starting.get(t, {})]
            if missing:
                raise KafkaSourceError(
                    f"startingOffsets={json.dumps(starting)} leaves out {', '.join(missing)}: "
                    "specific offsets must name every subscribed partition (-2 = earliest, "
                    "-1 = latest)")
        earliest = self._offsets.offsets(tps, "earliest")
        latest = self._offsets.offsets(tps, "latest")
        result: Offsets = {}
        for tp in tps:
            topic, part = tp
            if isinstance(starting, dict):
                wanted = starting.get(topic, {}).get(str(part), EARLIEST)
            else:
                wanted = LATEST if starting == "latest" else EARLIEST
            offset = {EARLIEST: earliest[tp], LATEST: latest[tp]}.get(wanted, wanted)
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
                # other records.
                self._lost(f"{topic}-{part} ends at offset {end}, behind offset {begin} already "
                           "read: the topic was recreated or truncated")
                log.warning("restarting %s-%d at its earliest offset after data loss", *tp)
                begin = self._offsets.offsets([tp], "earliest")[tp]
            if self._target is not None:
                end = min(end, self._target.get(topic, {}).get(str(part), begin))
            ranges.append(OffsetRange(topic, part, begin, max(begin, end)))
        return ranges

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ranges = self._available(start)
        if isinstance(limit, ReadMaxRows):
            ranges = rate_limit(ranges, limit.max_rows)
        result: Offsets = {t: dict(parts) for t, parts in start.items()}
        for topic, parts in to_offsets(ranges).items():
            result.setdefault(topic, {}).update(parts)
        return result

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._partitions()
        latest = self._offsets.offsets(tps, "latest")
        self._target = to_offsets([OffsetRange(t, p, 0, end) for (t, p), end in latest.items()])

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        planned = [
            (topic, int(part), start.get(topic, {}).get(part), stop)
            for topic, parts in end.items() for part, stop in parts.items()
        ]
        missing = [(t, p) for t, p, s, _ in planned if s is None]
        log_start = self._offsets.offsets([(t, p) for t, p, _, _ in planned], "earliest")
        out: list[InputPartition] = []
        for topic, part, begin, stop in planned:
            first = log_start[(topic, part)]
            begin = first if (topic, part) in missing else begin
            if begin < first:
                self._lost(f"offsets [{begin}, {first}) of {topic}-{part} were deleted from "
                           "the broker before they were read (retention)")
                begin = first
            if begin < stop:
                out.append(_RangePartition(OffsetRange(topic, part, begin, stop)))
        return out

    def _lost(self, message: str) -> None:
        if self._opts.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to skip them.")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        r: OffsetRange = partition.range  # type: ignore[attr-defined]
        if self._opts.ranges_only:
            yield pa.RecordBatch.from_pylist(
                [{"topic": r.topic, "partition": r.partition,
                  "startOffset": r.start, "endOffset": r.end}],
                schema=RANGES_SCHEMA,
            )
            return
        for messages in consume_range(
            self._opts.client_config, r.topic, r.partition, r.start, r.end,
            self._opts.poll_timeout_ms, self._opts.fail_on_data_loss,
        ):
            batch = messages_to_batch(messages, self._opts.include_headers)
            if not self._opts.include_headers:
                batch = batch.drop_columns(["headers"])
            yield batch

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: positions live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        self._reader = None
