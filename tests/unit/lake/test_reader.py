"""Printing records: byte formats, CSV and JSON lines, and errors that name the record."""

from __future__ import annotations

import datetime as dt
import io
import json

import pyarrow as pa
import pytest

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.reader import RecordFormatError, parse_from_offsets, write


def batch(*rows: tuple[bytes | None, bytes | None]) -> pa.RecordBatch:
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return pa.RecordBatch.from_pylist([
        {"key": k, "value": v, "topic": "t", "partition": 0, "offset": i, "timestamp": ts,
         "timestampType": 0, "headers": [{"key": "h", "value": None}]}
        for i, (k, v) in enumerate(rows)], schema=KAFKA_SCHEMA)


def test_json_values_are_embedded_and_nulls_stay_null() -> None:
    out = io.StringIO()
    count = write([batch((b"k", b'{"a":[1,2]}'), (b"k", None))], out, value_format="json")
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert count == 2
    assert lines[0]["value"] == {"a": [1, 2]} and lines[1]["value"] is None
    assert lines[0]["timestamp_ms"] == 1767225600000 and lines[0]["headers"] == [["h", None]]


def test_csv_with_hex_keys() -> None:
    out = io.StringIO()
    write([batch((b"\x00\xff", b"v,1"))], out, fmt="csv", key_format="hex")
    assert out.getvalue().splitlines() == [
        "partition,offset,timestamp_ms,key,value,headers",
        '0,0,1767225600000,00ff,"v,1","[[""h"",null]]"']


@pytest.mark.parametrize(("rows", "kwargs", "message"), [
    ([(b"\xff", b"v")], {}, "offset 0: the key is not UTF-8"),
    ([(b"k", b"not json")], {"value_format": "json"}, "the value is not JSON"),
    ([(b"k", b"v")], {"fmt": "xml"}, "--format 'xml': must be one of jsonl, csv"),
])
def test_what_does_not_fit_stops_with_the_record_and_a_format_that_fits(
        rows, kwargs, message) -> None:
    with pytest.raises(RecordFormatError, match=message):
        write([batch(*rows)], io.StringIO(), **kwargs)


def test_from_offsets() -> None:
    assert parse_from_offsets("0:120, 2:0") == {0: 120, 2: 0}
    assert parse_from_offsets(None) == {}
    with pytest.raises(RecordFormatError, match="'1:-5' must be PARTITION:OFFSET"):
        parse_from_offsets("0:1,1:-5")


def test_header_values_print_as_text_and_only_other_bytes_as_base64() -> None:
    """As kcat shows them: text as text, whatever the value's format; bytes that are not
    UTF-8 as base64, marked so."""
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = pa.RecordBatch.from_pylist([{
        "key": b"k", "value": b'{"a":1}', "topic": "t", "partition": 0, "offset": 0,
        "timestamp": ts, "timestampType": 0,
        "headers": [{"key": "trace", "value": b"abc-123"}, {"key": "raw", "value": b"\xff\x00"},
                    {"key": "none", "value": None}]}], schema=KAFKA_SCHEMA)
    for value_format in ("json", "string"):
        out = io.StringIO()
        write([rows], out, value_format=value_format)
        assert json.loads(out.getvalue())["headers"] == [
            ["trace", "abc-123"], ["raw", "/wA=", "base64"], ["none", None]]
    out = io.StringIO()
    write([rows], out, value_format="hex")
    assert json.loads(out.getvalue())["headers"][0] == ["trace", "6162632d313233"]
