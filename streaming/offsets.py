"""Offset planning for the Kafka source: which ranges a micro-batch reads.

Offsets travel through Spark's checkpoint as ``{"topic": {"partition": offset}}`` (string
partition keys, as JSON needs), the shape of Spark's built-in Kafka source.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from compactor.exceptions import BrokerUnavailableError
from compactor.kafka.admin import admin_client
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


def to_offsets(ranges: list[OffsetRange], use_end: bool = True) -> Offsets:
    result: Offsets = {}
    for r in ranges:
        result.setdefault(r.topic, {})[str(r.partition)] = r.end if use_end else r.start
    return result


class OffsetReader:
    """Asks the cluster which partitions exist and where their logs start and end.

    The end is the last stable offset under read_committed, the high watermark otherwise,
    exactly as a consumer with the same isolation level would stop.
    """

    def __init__(self, client_config: Mapping[str, str], timeout_s: float = 30.0) -> None:
        self._admin = admin_client(client_config)
        self._timeout = timeout_s
        self._isolation = (
            IsolationLevel.READ_UNCOMMITTED
            if client_config.get("isolation.level") == "read_uncommitted"
            else IsolationLevel.READ_COMMITTED
        )
        self._servers = client_config.get("bootstrap.servers", "?")

    def partitions(self, topics: list[str] | None, pattern: str | None) -> list[tuple[str, int]]:
        """Partitions of the subscribed topics (or of every topic matching ``pattern``)."""
        try:
            meta = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"cannot reach Kafka at {self._servers}: {exc.args[0]} "
                "(check bootstrap.servers and that the cluster is up)"
            ) from exc
        regex = re.compile(pattern) if pattern else None
        found: list[tuple[str, int]] = []
        for name, topic in meta.topics.items():
            if topic.error is not None:
                continue
            if (topics is not None and name in topics) or (regex and regex.fullmatch(name)):
                found.extend((name, p) for p in topic.partitions)
        return sorted(found)

    def offsets(self, tps: list[tuple[str, int]], which: str) -> dict[tuple[str, int], int]:
        """``which`` = "earliest" (log start offset) or "latest" (end by isolation level)."""
        if not tps:
            return {}
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        request = {TopicPartition(t, p): spec for t, p in tps}
        try:
            futures = self._admin.list_offsets(
                request, isolation_level=self._isolation, request_timeout=self._timeout
            )
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"cannot list {which} offsets at {self._servers}: {exc.args[0]}"
            ) from exc

