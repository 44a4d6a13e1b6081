"""Undecodable records at ingest: what goes to ``L/T/rejected`` beside the log.

A null key cannot enter a compacted log, so such a record goes to ``rejected`` *instead of*
the log. An undecodable record (a topic with ``key.format`` / ``value.format`` other than
``bytes``) is a fine Kafka record: it goes to the log like every other, because the log is
the exact mirror, *and* to ``rejected`` with the reason, so that no one has to find out from
a missing row in the latest-value table. Both ride in the micro-batch's own commit (the
ingest app transaction of ``rejected``), so each is reported exactly once. Tombstones are
never decoded: a delete needs only the key's bytes.
"""

from __future__ import annotations

import pyarrow as pa

from compactor.formats import TopicFormat
from compactor.formats.records import decode_records, decoders_for, first_failures
from compactor.lake.rejected import rejected_rows


class RecordChecker:
    """Decodes a topic's records in a write task to find the ones that cannot be decoded."""

    def __init__(self, formats: TopicFormat, topic: str) -> None:
        self.decoders = decoders_for(topic, formats)

    def undecodable(self, batch: pa.RecordBatch | pa.Table, now_ms: int,
                    ) -> pa.Table | None:
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
