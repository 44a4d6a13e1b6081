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

import pyarrow as pa
import pyarrow.compute as pc

from compactor.formats import Decoder, TopicFormat
from compactor.lake.rejected import rejected_rows

__all__ = ["NULL_KEY_REASON", "RecordChecker", "rejected_rows"]

NULL_KEY_REASON = "null key on a compacted topic (cleanup.policy contains compact)"


class RecordChecker:
    """Decodes a topic's records in a write task to find the ones that cannot be decoded."""

    def __init__(self, formats: TopicFormat, topic: str) -> None:
        registry = dict(formats.registry)
        self.key = Decoder(formats.key, registry, topic, True) if formats.key.typed else None
        self.value = (Decoder(formats.value, registry, topic, False) if formats.value.typed
                      else None)

    def undecodable(self, batch: pa.RecordBatch, now_ms: int) -> pa.Table | None:
        """Rows for ``rejected`` of the records in ``batch`` that do not decode, or None."""
        if batch.num_rows == 0:
            return None
        values = batch.column("value")
        live = pc.is_valid(values)
        reasons: list[str | None] = [None] * batch.num_rows
        schema_ids: list[int | None] = [None] * batch.num_rows
        for side, decoder, column in (("key", self.key, batch.column("key")),
                                      ("value", self.value, values)):
            if decoder is None:
                continue
            # tombstones are not decoded: null them out of the key column too
            result = decoder.decode(pc.if_else(live, column, pa.scalar(None, column.type)))
            for row, reason in enumerate(result.reasons):
                if reason is not None and reasons[row] is None:
                    reasons[row] = f"{side}: {reason}"
                    schema_ids[row] = result.schema_ids[row]
        bad = [i for i, r in enumerate(reasons) if r is not None]
        if not bad:
            return None
        picked = pa.array(bad, pa.int64())
        return rejected_rows(batch.take(picked), [reasons[i] for i in bad],
                             [schema_ids[i] for i in bad], now_ms)
