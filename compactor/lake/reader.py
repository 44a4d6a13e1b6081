"""``compactor read``: a kcat-like view of the lake, records as JSON lines or CSV.

Keys and values are bytes; ``--key-format``/``--value-format`` say how to print them:
``string`` (UTF-8, the default), ``hex``, ``base64``, or ``json`` (the bytes parsed as a JSON
document and embedded as one; in CSV, printed compactly). Bytes that do not fit the format
stop the output with an error naming the record and a format that fits; nothing is replaced
or skipped silently. Null stays null (JSON) or empty (CSV): a tombstone's value is null.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

import pyarrow as pa

from compactor.exceptions import CompactorError
from compactor.formats import Decoder
from compactor.formats.records import by_row
from compactor.lake.layout import LOG_SCHEMA

FORMATS = ("jsonl", "csv")
BYTE_FORMATS = ("string", "hex", "base64", "json")
_LOG_COLUMNS = frozenset(LOG_SCHEMA.names)  # anything else is a typed column of the table
CSV_COLUMNS = ["partition", "offset", "timestamp_ms", "key", "value", "headers"]


class RecordFormatError(CompactorError):
    """A key, value or header did not fit the chosen byte format."""

    exit_code = 2


def parse_from_offsets(text: str | None) -> dict[int, int]:
    """``0:120,1:0`` -> {0: 120, 1: 0}."""
    if not text:
        return {}
    out: dict[int, int] = {}
    for part in text.split(","):
        partition, sep, offset = part.strip().partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise RecordFormatError(
                f"--from-offset {text!r}: {part.strip()!r} must be PARTITION:OFFSET with "
                "non-negative integers, comma-separated (for example 0:120,1:0)")
        out[int(partition)] = int(offset)
    return out


def _bytes(data: bytes | None, fmt: str, what: str, where: str) -> Any:
    if data is None:
        return None
    if fmt == "hex":
        return data.hex()
    if fmt == "base64":
        return base64.b64encode(data).decode()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordFormatError(
            f"{where}: the {what} is not UTF-8 ({data[:16]!r}...); print it with "
            f"--{what.split()[0]}-format hex or base64") from None
    if fmt == "string":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordFormatError(
            f"{where}: the {what} is not JSON ({exc.msg} at character {exc.pos}); print it "
            f"with --{what.split()[0]}-format string") from None


def _header(key: str, value: bytes | None, value_format: str) -> list[Any]:
    """A header as [key, value]: its value as text, or in ``value_format`` when that is hex or
    base64; a value that is not UTF-8 text as [key, its base64, "base64"]."""
    if value is None or value_format in ("hex", "base64"):
        return [key, _bytes(value, value_format, "value of a header", "")]
    try:
        return [key, value.decode("utf-8")]
    except UnicodeDecodeError:
        return [key, base64.b64encode(value).decode(), "base64"]


def _decoded(batch: pa.RecordBatch, decoder: Decoder | None, side: str,
             ) -> list[tuple[Any, str | None]] | None:
    """Per row of ``batch``: (decoded value, None) or (None, why it did not decode)."""
    if decoder is None:
        return None
    result = decoder.decode(batch.column(side))
    return list(zip(by_row(result), result.reasons, strict=True))


def render(rows: Iterable[dict[str, Any]], key_format: str, value_format: str,
           decoded: tuple[list[tuple[Any, str | None]] | None, ...] = (None, None),
           ) -> Iterator[dict[str, Any]]:
    """Records with their bytes turned into printable values, in order; ``decoded``: the
    keys' and values' decoded forms (the topic's formats), where the topic has them."""
    for i, row in enumerate(rows):
        where = f"partition {row['partition']} offset {row['offset']}"
        ts = row["timestamp"]
        record: dict[str, Any] = {
            "partition": row["partition"], "offset": row["offset"],
            "timestamp_ms": None if ts is None else int(ts.timestamp() * 1000)}
        for side, fmt, column in (("key", key_format, decoded[0]),
                                  ("value", value_format, decoded[1])):
            if column is None or row[side] is None:
                record[side] = _bytes(row[side], fmt, side, where)
                continue
            value, why = column[i]
            record[side] = value if why is None else base64.b64encode(row[side]).decode()
            if why is not None:  # printed as base64, with the reason it did not decode
                record[f"{side}_error"] = why
        record["headers"] = [_header(h["key"], h["value"], value_format)
                             for h in row["headers"] or []]
        # the latest-value table's typed columns, when the topic has them
        record |= {k: v for k, v in row.items() if k not in _LOG_COLUMNS}
        yield record


def write(batches: Iterable[pa.RecordBatch], out: IO[str], fmt: str = "jsonl",
          key_format: str = "string", value_format: str = "string",
          decoders: tuple[Decoder | None, Decoder | None] = (None, None)) -> int:
    """Print every record of ``batches``; returns how many. ``decoders`` (the topic's key
    and value formats) print decoded keys and values instead of their bytes."""
    if fmt not in FORMATS:
        raise RecordFormatError(f"--format {fmt!r}: must be one of {', '.join(FORMATS)}")
    for name, value in (("--key-format", key_format), ("--value-format", value_format)):
        if value not in BYTE_FORMATS:
            raise RecordFormatError(f"{name} {value!r}: must be one of {', '.join(BYTE_FORMATS)}")
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(CSV_COLUMNS)
    count = 0
    for batch in batches:
        decoded = (_decoded(batch, decoders[0], "key"), _decoded(batch, decoders[1], "value"))
        for record in render(batch.to_pylist(), key_format, value_format, decoded):
            if writer is None:
                out.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False,
                                     default=str) + "\n")
            else:
                writer.writerow([
                    record["partition"], record["offset"], record["timestamp_ms"],
                    _cell(record["key"]), _cell(record["value"]),
                    json.dumps(record["headers"], separators=(",", ":")) if record["headers"]
                    else "",
                ])
            count += 1
    return count


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)
