"""What goes to ``L/T/rejected`` at ingest: null keys of compacted topics, undecodable records.

A null key cannot enter a compacted log, so such a record goes to ``rejected`` *instead of*
the log. An undecodable record (a topic with ``key.format`` / ``value.format`` other than
``bytes``) is a fine Kafka record: it goes to the log like every other, because the log is
the exact mirror, *and* to ``rejected`` with the reason, so that no one has to find out from
a missing row in the latest-value table. Both ride in the micro-batch's own commit (the
ingest app transaction of ``rejected``), so each is reported exactly once. Tombstones are
never decoded: a delete needs only the key's bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from compactor.formats import TopicFormat
from compactor.formats.records import decode_records, decoders_for, first_failures
from compactor.lake.rejected import rejected_rows

NULL_KEY_REASON = "null key on a compacted topic (cleanup.policy contains compact)"
HEADERS_REASON = ("headers unreadable (a header key that is not UTF-8): the record is in the "
                  "log with null headers")

# The kinds of rejection, the ``reason`` label of compactor_records_rejected_total.
NULL_KEY = "null_key"  # kept out of the log
HEADERS = "headers"  # in the log, headers null
UNDECODABLE = "undecodable"  # in the log, not in the latest-value table
TYPE_CHANGE = "type_change"  # a schema the table's columns cannot take (reported at MERGE)


def rejection_kind(reason: str) -> str:
    """The kind of a ``rejected`` row's reason."""
    if reason == NULL_KEY_REASON:
        return NULL_KEY
    if reason == HEADERS_REASON:
        return HEADERS
    return UNDECODABLE


@dataclass(frozen=True)
class Rejections:
    """What one range (or batch) sent to ``rejected``: records per kind, the first reason."""

    counts: Mapping[str, int]
    first: str | None  # "partition P offset O: reason"

    @classmethod
    def combined(cls, parts: Iterable[Rejections]) -> Rejections:
        counts: dict[str, int] = {}
        first = None
        for part in parts:
            for kind, n in part.counts.items():
                counts[kind] = counts.get(kind, 0) + n
            first = first or part.first
        return cls(counts, first)


class RecordChecker:
    """Decodes a topic's records in a write task to find the ones that cannot be decoded."""

    def __init__(self, formats: TopicFormat, topic: str) -> None:
        self.decoders = decoders_for(topic, formats)

    def undecodable(self, batch: pa.RecordBatch, now_ms: int) -> pa.Table | None:
        """Rows for ``rejected`` of the records in ``batch`` that do not decode, or None."""
        if batch.num_rows == 0:
            return None
        reasons, schema_ids = first_failures(batch.num_rows,
                                             decode_records(batch, self.decoders))
        bad = [i for i, r in enumerate(reasons) if r is not None]
        if not bad:
            return None
        return rejected_rows(batch.take(pa.array(bad, pa.int64())), [reasons[i] for i in bad],
                             [schema_ids[i] for i in bad], now_ms)
