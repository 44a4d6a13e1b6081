"""Offset planning for the Kafka source: which ranges a micro-batch reads.

Offsets travel through Spark's checkpoint as ``{"topic": {"partition": offset}}`` (string
partition keys, as JSON needs), the shape of Spark's built-in Kafka source.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from streaming.exceptions import KafkaSourceError

EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def parse_starting_offsets(value: str) -> str | Offsets:
    """``earliest``, ``latest`` or JSON ``{"t":{"0":23,"1":-2}}`` (-2 earliest, -1 latest)."""
    text = value.strip()
    if text in ("earliest", "latest"):
        return text
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
        isinstance(parts, dict)
        and all(isinstance(o, int) and re.fullmatch(r"\d+", str(p)) for p, o in parts.items())
        for parts in parsed.values()
    ):
        raise KafkaSourceError(
            f"startingOffsets={value!r}: must be 'earliest', 'latest' or JSON like "
            '{"topic":{"0":23,"1":-2}} (-2 = earliest, -1 = latest)'
        )
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


@dataclass(frozen=True)
class ByTimestamp:
    """Offsets named by time: each partition's first offset whose record's timestamp is at or
    after the given time, as Kafka's ListOffsets by timestamp answers.

    ``every``: one time for every partition (``startingTimestamp``); otherwise ``partitions``
    gives each partition's (``startingOffsetsByTimestamp``). ``no_match``: "error" or "latest",
    where to start a partition no record of which is that recent (ends always go to latest).
    """

    every: int | None
    partitions: dict[str, dict[str, int]]
    no_match: str = "error"

    def at(self, topic: str, partition: int) -> int | None:
        """The time asked for one partition (None: the option leaves it out)."""
        if self.every is not None:
            return self.every
        return self.partitions.get(topic, {}).get(str(partition))


def _millis(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def parse_timestamp(name: str, value: str, no_match: str) -> ByTimestamp:
    """``startingTimestamp``/``endingTimestamp``: milliseconds since the epoch."""
    millis = _millis(value)
    if millis is None:
        raise KafkaSourceError(f"option {name}={value!r}: must be a timestamp in milliseconds "
                               "since the epoch (a whole number, 0 or more)")
    return ByTimestamp(millis, {}, no_match)


def parse_timestamps(name: str, value: str, no_match: str) -> ByTimestamp:
    """``...OffsetsByTimestamp``: JSON ``{"topic":{"0":1700000000000}}``."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed or not all(
        isinstance(parts, dict) and parts
        and all(re.fullmatch(r"\d+", str(p)) and _millis(ts) is not None
                for p, ts in parts.items())
        for parts in parsed.values()
    ):
        raise KafkaSourceError(
            f"option {name}={value!r}: must be JSON like {{\"topic\":{{\"0\":1700000000000}}}}, "
            "a timestamp in milliseconds since the epoch for every partition")
    return ByTimestamp(None, {t: {str(p): int(ts) for p, ts in parts.items()}
                              for t, parts in parsed.items()}, no_match)


def rate_limit(ranges: list[OffsetRange], max_records: int) -> list[OffsetRange]:
    """Cut ranges to at most ``max_records`` in total, shared in proportion to each backlog.

    Every partition with a backlog advances by at least one record, so no partition starves;
    the total may then exceed the limit by at most the number of partitions, as in Spark.
    """
    total = sum(r.size for r in ranges)
    if max_records <= 0 or total <= max_records:
        return ranges
    out: list[OffsetRange] = []
    for r in ranges:
        if r.size == 0:
            out.append(r)
            continue
        share = max(1, (max_records * r.size) // total)
        out.append(OffsetRange(r.topic, r.partition, r.start, min(r.end, r.start + share)))
    return out


def _pieces(r: OffsetRange, parts: int) -> list[OffsetRange]:
    step, extra = divmod(r.size, parts)
    out, begin = [], r.start
    for i in range(parts):
        end = begin + step + (1 if i < extra else 0)
        out.append(OffsetRange(r.topic, r.partition, begin, end))
        begin = end
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int = 1,
                 max_records: int = 0) -> list[OffsetRange]:
    """Spark's ``minPartitions`` and ``maxRecordsPerPartition``: more, smaller tasks.

    With fewer non-empty ranges than ``min_partitions``, each is cut into pieces in proportion
    to its share of the records (at least one); then no piece holds more than ``max_records``
    (0: no bound). Pieces of one Kafka partition are contiguous and in offset order.
    """
    live = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in live)
    out: list[OffsetRange] = []
    for r in live:
        parts = 1
        if len(live) < min_partitions and total:
            parts = max(1, round(r.size / total * min_partitions))
        if max_records:
            parts = max(parts, -(-r.size // max_records))
        out.extend(_pieces(r, min(parts, r.size)))
    return out


def to_offsets(ranges: list[OffsetRange], use_end: bool = True) -> Offsets:
    result: Offsets = {}
    for r in ranges:
        result.setdefault(r.topic, {})[str(r.partition)] = r.end if use_end else r.start
    return result
