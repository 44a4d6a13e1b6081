"""The options of the ``pykafka`` source: Spark's names and meanings, validated once.

Every option of Spark's built-in Kafka source (Spark 4.x) is either implemented with Spark's
meaning or refused by name when the query is defined (``load()``); none is ignored. Option
names are case-insensitive, as in Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from compactor.kafka.client_config import check_with_librdkafka, translate_java_keys
from streaming.exceptions import KafkaSourceError
from streaming.offset_planning import (
    LATEST,
    ByTimestamp,
    Offsets,
    parse_starting_offsets,
    parse_timestamp,
    parse_timestamps,
)

SHORT_NAME = "pykafka"

# Options Spark's source refuses in a streaming query, with its reason (Spark ignores
# endingTimestamp there; here no option is ignored).
STREAMING_REFUSED = {
    "endingOffsets": "ending offset not valid in streaming queries",
    "endingOffsetsByTimestamp": "ending timestamp not valid in streaming queries",
    "endingTimestamp": "ending timestamp not valid in streaming queries",
}
NO_MATCH = ("error", "latest")  # startingOffsetsByTimestampStrategy
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
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _refuse_unsupported(lower: Mapping[str, str], streaming: bool) -> None:
    """Options are named in Spark's spelling: Spark hands them over lower-cased."""
    for name, reason in STREAMING_REFUSED.items():
        if streaming and name.lower() in lower:
            raise KafkaSourceError(f"option {name}={lower[name.lower()]!r}: {reason}")
    for key, reason in CLIENT_REFUSED.items():
        if f"kafka.{key}" in lower:
            raise KafkaSourceError(
                f"Kafka option kafka.{key}={lower['kafka.' + key]!r} is not supported: {reason}")


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = str(options.get(name, str(default))).strip().lower()
    if value not in ("true", "false"):
        raise KafkaSourceError(f"option {name}={value!r}: must be true or false")
    return value == "true"


def _count(options: Mapping[str, str], names: Mapping[str, str], key: str, default: int,
           positive: bool = False) -> int:
    value = options.get(key, str(default)).strip()
    if not value.isdigit() or (positive and int(value) == 0):
        rule = "a positive whole number" if positive else "a whole number"
        raise KafkaSourceError(f"option {names.get(key, key)}={value!r}: must be {rule}")
    return int(value)


def _duration_ms(options: Mapping[str, str], names: Mapping[str, str], key: str,
                 default: str) -> int:
    value = options.get(key, default)
    match = _DURATION.match(value)
    if match is None:
        raise KafkaSourceError(f"option {names.get(key, key)}={value!r}: must be a duration "
                               "such as 500ms, 30s, 15m or 1h")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def parse_assign(value: str) -> list[tuple[str, int]]:
    """``assign``: JSON ``{"topicA":[0,1],"topicB":[2,4]}``, as in Spark."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed or not all(
            isinstance(parts, list) and all(isinstance(p, int) and p >= 0 for p in parts)
            for parts in parsed.values()):
        raise KafkaSourceError(f"option assign={value!r}: must be JSON like "
                               '{"topicA":[0,1],"topicB":[2,4]}')
    return sorted({(str(t), p) for t, parts in parsed.items() for p in parts})


def _bound(lower: Mapping[str, str], side: str, default: str, no_match: str,
           ) -> str | Offsets | ByTimestamp:
    """Where reading starts or ends; as Spark, a timestamp for every partition wins over
    timestamps by partition, which win over offsets."""
    if f"{side}timestamp" in lower:
        return parse_timestamp(f"{side}Timestamp", lower[f"{side}timestamp"], no_match)
    if f"{side}offsetsbytimestamp" in lower:
        return parse_timestamps(f"{side}OffsetsByTimestamp",
                                lower[f"{side}offsetsbytimestamp"], no_match)
    return parse_starting_offsets(lower.get(f"{side}offsets", default))


class SourceOptions:
    """The source's options, validated once; picklable, so it travels to tasks.

    ``streaming``: True for a streaming query, False for a batch read, None at ``load()``,
    before Spark says which (the checks common to both run then).
    """

    def __init__(self, options: Mapping[str, str], streaming: bool | None = True) -> None:
        opts = {str(k): str(v) for k, v in options.items()}
        lower = {k.lower(): v for k, v in opts.items()}
        names = {k.lower(): k for k in opts}
        if "kafka.bootstrap.servers" not in lower:
            raise KafkaSourceError("option kafka.bootstrap.servers is required")
        _refuse_unsupported(lower, streaming is True)
        strategies = [k for k in ("assign", "subscribe", "subscribepattern") if k in lower]
        if len(strategies) != 1:
            raise KafkaSourceError(
                "give exactly one of the options assign, subscribe, subscribePattern")
        subscribe, pattern = lower.get("subscribe"), lower.get("subscribepattern")
        self.topics = [t.strip() for t in subscribe.split(",") if t.strip()] if subscribe else None
        if subscribe is not None and not self.topics:
            raise KafkaSourceError(f"option subscribe={subscribe!r}: names no topic")
        self.pattern = pattern
        self.assigned = parse_assign(lower["assign"]) if "assign" in lower else None
        self.client_config = translate_java_keys({
            k[len("kafka."):]: v for k, v in opts.items() if k.lower().startswith("kafka.")
        })
        self.client_config.setdefault("isolation.level", "read_committed")
        # No consumer group is joined (ranges are assigned); the group id only names the
        # consumers, as Spark's groupIdPrefix (default spark-kafka-source) does.
        self.client_config.setdefault(
            "group.id", lower.get("groupidprefix", "kafka-lake-compactor"))
        check_with_librdkafka(self.client_config)
        no_match = lower.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if no_match not in NO_MATCH:
            raise KafkaSourceError(
                f"option startingOffsetsByTimestampStrategy={no_match!r}: must be error (fail "
                "when no record is that recent) or latest (start such a partition at its end)")
        default_start = "earliest" if streaming is False else "latest"
        self.starting = _bound(lower, "starting", default_start, no_match)
        self.ending: str | Offsets | ByTimestamp = "latest"
        if streaming is False:
            self.ending = _bound(lower, "ending", "latest", "latest")
            self._check_batch_bounds()
        self.max_offsets = _count(lower, names, "maxoffsetspertrigger", 0)
        self.min_offsets = _count(lower, names, "minoffsetspertrigger", 0)
        if self.max_offsets and self.min_offsets > self.max_offsets:
            raise KafkaSourceError(
                f"option minOffsetsPerTrigger={self.min_offsets} is higher than "
                f"maxOffsetsPerTrigger={self.max_offsets}")
        self.max_trigger_delay_ms = _duration_ms(lower, names, "maxtriggerdelay", "15m")
        self.min_partitions = _count(lower, names, "minpartitions", 1, positive=True)
        self.max_records_per_partition = _count(lower, names, "maxrecordsperpartition", 0)
        if "maxrecordsperpartition" in lower and self.max_records_per_partition == 0:
            raise KafkaSourceError(
                "option maxRecordsPerPartition='0': must be a positive whole number")
        self.fetch_retries = _count(lower, names, "fetchoffset.numretries", 3)
        self.fetch_retry_interval_ms = _count(lower, names, "fetchoffset.retryintervalms", 1000)
        self.poll_timeout_ms = _count(lower, names, "kafkaconsumer.polltimeoutms", 120_000)
        self.fail_on_data_loss = _flag(lower, "failondataloss", True)
        self.include_headers = _flag(lower, "includeheaders", False)
        self.ranges_only = _flag(lower, "compactor.ranges", False)

    def _check_batch_bounds(self) -> None:
        """As Spark: a batch starts at no ``latest`` and ends at no ``earliest``."""
        if self.starting == "latest" or (isinstance(self.starting, dict) and any(
                o == LATEST for parts in self.starting.values() for o in parts.values())):
            raise KafkaSourceError("option startingOffsets: a batch query cannot start at "
                                   "latest (use earliest or specific offsets)")
        if self.ending == "earliest" or (isinstance(self.ending, dict) and any(
                o == -2 for parts in self.ending.values() for o in parts.values())):
            raise KafkaSourceError("option endingOffsets: a batch query cannot end at earliest "
                                   "(use latest or specific offsets)")
