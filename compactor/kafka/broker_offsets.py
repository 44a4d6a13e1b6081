"""Where each partition's log starts and ends on the cluster, as a consumer would see it.

The offsets are asked through a consumer's ``offsets_for_times`` with Kafka's special
timestamps (-2: the log start, -1: the end by isolation level), one ListOffsets request per
leader answered in one list: the AdminClient's ``list_offsets`` makes a Python future per
partition, which over hundreds of partitions cost more than the request (bench/README.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from compactor.exceptions import BrokerUnavailableError
from compactor.kafka.clients import assigned_consumer, request_timeout_s

_LEADERSHIP = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
# Partitions this client has no metadata for yet (added since it last asked).
_UNKNOWN = (KafkaError._NOENT, KafkaError._UNKNOWN_PARTITION)
# ListOffsets' special timestamps.
_EARLIEST, _LATEST = -2, -1


class OffsetReader:
    """Asks the cluster which partitions exist and where their logs start and end.

    The end is the last stable offset under read_committed, the high watermark otherwise,
    exactly as a consumer with the same isolation level would stop.
    """

    def __init__(self, client_config: Mapping[str, str], timeout_s: float | None = None,
                 retries: int = 0, retry_interval_ms: int = 1000) -> None:
        self._client = assigned_consumer(client_config, **{"isolation.level": "read_committed"})
        self._timeout = (timeout_s if timeout_s is not None
                         else request_timeout_s(client_config, 30.0))
        # Spark's fetchOffset.numRetries / fetchOffset.retryIntervalMs: offset requests are
        # tried again this many times before the error stands.
        self._retries = retries
        self._retry_interval_s = retry_interval_ms / 1000
        self._servers = client_config.get("bootstrap.servers", "?")

    def partitions(self, topics: list[str] | None, pattern: str | None) -> list[tuple[str, int]]:
        """Partitions of the subscribed topics (or of every topic matching ``pattern``)."""
        try:
            meta = self._client.list_topics(timeout=self._timeout)
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
        """``which`` = "earliest" (log start offset) or "latest" (end by isolation level).

        An answer that carries no offset for a partition (librdkafka's -1001, seen when the
        broker froze mid-request) counts as a failed attempt like an error does: taken as an
        offset, it would read as a truncated topic and stop the run for data loss.
        """
        spec = _EARLIEST if which == "earliest" else _LATEST
        return self._list({tp: spec for tp in tps}, f"{which} offsets", 0)

    def offsets_for_times(self, timestamps: Mapping[tuple[str, int], int],
                          ) -> dict[tuple[str, int], int | None]:
        """For each partition, the first offset whose record's timestamp is at or after the
        given time (milliseconds since the epoch); None where no record is that recent."""
        found = self._list(timestamps, "offsets by timestamp", -1)
        return {tp: None if offset == -1 else offset for tp, offset in found.items()}

    def _list(self, specs: Mapping[tuple[str, int], int], what: str,
              lowest: int) -> dict[tuple[str, int], int]:
        """One ListOffsets request for every partition (``specs``: its timestamp, or -2 for
        the log start, -1 for the end), tried again as configured; an offset below
        ``lowest`` counts as no answer for its partition."""
        if not specs:
            return {}
        refreshed = False
        attempt = 0
        # Leadership moving (a topic just created, a broker restarting) is retried within the
        # request timeout, as Kafka's clients retry it within default.api.timeout.ms.
        moving_until = time.monotonic() + self._timeout
        while True:
            cause: KafkaException | None = None
            try:
                answer = self._client.offsets_for_times(
                    [TopicPartition(t, p, spec) for (t, p), spec in specs.items()],
                    self._timeout)
                failed = next((tp.error for tp in answer if tp.error is not None), None)
                if failed is not None:
                    raise KafkaException(failed)
                found = {(tp.topic, tp.partition): tp.offset for tp in answer}
                problem = missing_offsets(found, lowest)
            except KafkaException as exc:
                problem, cause = str(exc.args[0]), exc
                error = exc.args[0] if exc.args else None
                if (not refreshed and isinstance(error, KafkaError)
                        and error.code() in _UNKNOWN):
                    # Partitions added since this client last read the cluster's metadata:
                    # it knows no leader for them until it asks again, once.
                    refreshed = True
                    self._refresh({t for t, _ in specs})
                    continue
                if (isinstance(error, KafkaError) and error.code() in _LEADERSHIP
                        and time.monotonic() < moving_until):
                    time.sleep(0.2)
                    self._refresh({t for t, _ in specs})
                    continue
            if not problem:
                return found
            if attempt == self._retries:
                raise BrokerUnavailableError(
                    f"cannot list {what} at {self._servers}: {problem}"
                    + (f" (after {attempt + 1} attempts)" if attempt else "")
                ) from cause
            attempt += 1
            time.sleep(self._retry_interval_s)

    def _refresh(self, topics: set[str]) -> None:
        """Read the metadata of ``topics`` again (librdkafka caches partition leaders)."""
        for topic in sorted(topics):
            try:
                self._client.list_topics(topic=topic, timeout=self._timeout)
            except KafkaException:  # the offsets request that follows reports the failure
                return


def missing_offsets(found: Mapping[tuple[str, int], int], lowest: int = 0) -> str:
    """What is wrong with an offsets answer ("" if nothing): partitions given no offset
    (one below ``lowest``)."""
    bad = sorted((tp, offset) for tp, offset in found.items() if offset < lowest)
    if not bad:
        return ""
    named = ", ".join(f"{t}-{p} ({offset})" for (t, p), offset in bad)
    return f"the answer held no offset for {named}; the broker may be overloaded or frozen"
