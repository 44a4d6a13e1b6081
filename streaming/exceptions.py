"""Errors of the Spark side, under the product's one root error."""

from __future__ import annotations

from compactor.exceptions import CompactorError, DataLossError

__all__ = ["DataLossError", "KafkaSourceError", "StreamingError"]


class StreamingError(CompactorError):
    """The streaming query failed; the message carries Spark's reason, unwrapped from Py4J."""


class KafkaSourceError(StreamingError):
    """An option of the Kafka data source is missing or malformed."""

    exit_code = 2
