"""Errors of the Spark side, under the product's one root error."""

from __future__ import annotations

from compactor.exceptions import CompactorError, DataLossError

__all__ = ["DataLossError", "KafkaSourceError", "StreamingError", "first_line"]


class StreamingError(CompactorError):
    """The streaming query failed; the message carries Spark's reason, unwrapped from Py4J."""


class KafkaSourceError(StreamingError):
    """An option of the Kafka data source is missing or malformed."""

    exit_code = 2


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (Spark's reason before its stack trace), or its
    class name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
