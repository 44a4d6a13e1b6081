"""Decoding Kafka records, both sides at once: the one path for ingest, the table and ``read``.

A topic's decoders are made once per process (:func:`decoders_for`), so the registry
client's schema cache lasts as long as the process: a reused Spark worker or the driver
fetches each schema id once. Tombstones are never decoded: a delete needs only the key's
bytes, so their keys are left out too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from compactor.formats.decoder import Decoded, Decoder
from compactor.formats.spec import RecordFormat, TopicFormat

DecoderPair = tuple[Decoder | None, Decoder | None]  # (keys, values); None: bytes
_PAIRS: dict[tuple[object, ...], DecoderPair] = {}


def decoders_for(topic: str, formats: TopicFormat) -> DecoderPair:
    """The topic's key and value decoders, made once per process and formats."""
    ident = (topic, formats.key, formats.value, tuple(sorted(formats.registry.items())))
    if ident not in _PAIRS:
        registry = dict(formats.registry)
        _PAIRS[ident] = (
            Decoder(formats.key, registry, topic, True) if formats.key.typed else None,
            Decoder(formats.value, registry, topic, False) if formats.value.typed else None)
    return _PAIRS[ident]


def by_row(decoded: Decoded) -> list[Any]:
    """The decoded values (as Arrow gives them back) at their rows; None where none."""
    out: list[Any] = [None] * len(decoded.reasons)
    for group in decoded.groups:
        for row, value in zip(group.rows, group.array().to_pylist(), strict=True):
            out[row] = value
    return out


def decode_keys(keys: list[bytes], fmt: str, field: str | None, topic: str,
                registry: Mapping[str, str]) -> list[Any]:
    """Kafka keys of a registry format as a downstream table's keys: the decoded key, or its
    ``field`` when given; None where a key does not decode, lacks the field, or is a
    record without a field named (a record cannot be a column value to match)."""
    pair = decoders_for(topic, TopicFormat(RecordFormat(fmt), RecordFormat(), registry))
    assert pair[0] is not None
    values = by_row(pair[0].decode(pa.array(keys, pa.binary())))
    if field is None:
        return [None if isinstance(v, dict) else v for v in values]
    return [v.get(field) if isinstance(v, dict) else None for v in values]


def decode_records(records: pa.RecordBatch | pa.Table,
                   decoders: DecoderPair) -> list[tuple[str, Decoded]]:
    """("key" | "value", its Decoded) for each side that has a decoder; tombstones skipped."""
    live = pc.is_valid(records.column("value"))
    decoded = []
    for side, decoder in zip(("key", "value"), decoders, strict=True):
        if decoder is not None:
            column = records.column(side)
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            decoded.append((side, decoder.decode(
                pc.if_else(live, column, pa.scalar(None, column.type)))))
    return decoded


def first_failures(rows: int, decoded: list[tuple[str, Decoded]],
                   ) -> tuple[list[str | None], list[int | None]]:
    """Per row, why its key or value did not decode ("key: ..." first) and the schema id
    that failure named; None where both decoded."""
    reasons: list[str | None] = [None] * rows
    schema_ids: list[int | None] = [None] * rows
    for side, result in decoded:
        for row, reason in enumerate(result.reasons):
            if reason is not None and reasons[row] is None:
                reasons[row] = f"{side}: {reason}"
                schema_ids[row] = result.schema_ids[row]
    return reasons, schema_ids
