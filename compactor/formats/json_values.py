"""JSON values as the declared schema's column types, as Spark's JSON reader reads them.

A JSON topic's ``value.schema`` / ``key.schema`` is a Spark DDL string; each record's parsed
JSON is brought to its types here before it becomes typed columns, with the rules of Spark's
``from_json`` / ``spark.read.json`` (PERMISSIVE), so that the table holds what a Spark reader
of the same topic would:

- ``TIMESTAMP``: an ISO-8601 string (``2024-05-01T12:00:00Z``, ``2024-05-01 12:00:00.5+02:00``,
  a date alone; no zone is UTC), or a number of seconds since the epoch;
- ``DATE``: an ISO-8601 date (``2024-05-01``), or a timestamp string (its date in UTC);
- ``STRING``: a string; a number, boolean, object or array becomes its JSON text;
- ``BINARY``: base64 text; ``DECIMAL``: a number or a numeric string;
- ``FLOAT`` / ``DOUBLE``: a number, or ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
- whole-number types and ``BOOLEAN``: JSON numbers and booleans only, in range;
- a field missing from the object, or JSON ``null``, is null; fields not declared are ignored.

A value that fits none of these rejects the record with the field's path, the declared type
and what was found, the value itself quoted last (``updated_at: expected TIMESTAMP, found a
string (not an ISO-8601 time); quoting the record: "yesterday"``;
:mod:`compactor.formats.reasons`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
from typing import Any

import pyarrow as pa

from compactor.formats.reasons import quoting

_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf,
                   "-Infinity": -math.inf}


class Mismatch(ValueError):
    """A JSON value the declared type cannot hold; the message names the field's path."""


def _kind(value: Any) -> str:
    return {str: "a string", bool: "a boolean", dict: "an object", list: "an array",
            int: "a number", float: "a number"}.get(type(value), "a value")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(type_: pa.DataType) -> str:
    if pa.types.is_timestamp(type_):
        return "TIMESTAMP"
    if pa.types.is_date(type_):
        return "DATE"
    if pa.types.is_decimal(type_):
        return f"DECIMAL({type_.precision},{type_.scale})"
    if pa.types.is_struct(type_):
        return "STRUCT"
    if pa.types.is_list(type_):
        return "ARRAY"
    if pa.types.is_map(type_):
        return "MAP"
    names = {pa.string(): "STRING", pa.bool_(): "BOOLEAN", pa.int8(): "TINYINT",
             pa.int16(): "SMALLINT", pa.int32(): "INT", pa.int64(): "BIGINT",
             pa.float32(): "FLOAT", pa.float64(): "DOUBLE", pa.binary(): "BINARY"}
    return names.get(type_, str(type_))


def _fail(path: str, type_: pa.DataType, value: Any, why: str = "") -> Mismatch:
    where = path or "the record"
    rule = f"{where}: expected {_type_name(type_)}, found {_kind(value)}"
    return Mismatch(quoting(rule + (f" ({why})" if why else ""), _shown(value)))


def _timestamp(value: Any, path: str, type_: pa.DataType) -> dt.datetime:
    if isinstance(value, bool):
        raise _fail(path, type_, value)
    if isinstance(value, int | float):
        try:
            return _EPOCH + dt.timedelta(seconds=value)
        except OverflowError as exc:
            raise _fail(path, type_, value, "out of range") from exc
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise _fail(path, type_, value, "not an ISO-8601 time") from exc
        return parsed.replace(tzinfo=_UTC) if parsed.tzinfo is None else parsed
    raise _fail(path, type_, value)


def _date(value: Any, path: str, type_: pa.DataType) -> dt.date:
    if isinstance(value, str):
        text = value.strip()
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            pass
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError as exc:
            raise _fail(path, type_, value, "not an ISO-8601 date") from exc
        return (parsed if parsed.tzinfo is None else parsed.astimezone(_UTC)).date()
    raise _fail(path, type_, value)


def _whole(value: Any, path: str, type_: pa.DataType) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(path, type_, value)
    if isinstance(value, float) and not value.is_integer():
        raise _fail(path, type_, value, "not a whole number")
    bits = type_.bit_width
    if not -(2 ** (bits - 1)) <= int(value) < 2 ** (bits - 1):
        raise _fail(path, type_, value, f"out of range for {bits} bits")
    return int(value)


def _scalar(value: Any, path: str, type_: pa.DataType) -> Any:
    if pa.types.is_string(type_):
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if pa.types.is_boolean(type_):
        if isinstance(value, bool):
            return value
        raise _fail(path, type_, value)
    if pa.types.is_integer(type_):
        return _whole(value, path, type_)
    if pa.types.is_floating(type_):
        if isinstance(value, str) and value in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[value]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _fail(path, type_, value)
        return float(value)
    if pa.types.is_decimal(type_):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise _fail(path, type_, value)
        try:
            number = decimal.Decimal(str(value))
        except decimal.InvalidOperation as exc:
            raise _fail(path, type_, value, "not a number") from exc
        if not number.is_finite() or number.adjusted() >= type_.precision - type_.scale:
            raise _fail(path, type_, value, "out of range")
        return number.quantize(decimal.Decimal(1).scaleb(-type_.scale))
    if pa.types.is_timestamp(type_):
        return _timestamp(value, path, type_)
    if pa.types.is_date(type_):
        return _date(value, path, type_)
    if pa.types.is_binary(type_):
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise _fail(path, type_, value, "not base64") from exc
        raise _fail(path, type_, value)
    raise _fail(path, type_, value, "a type JSON records cannot hold")


def conform(value: Any, type_: pa.DataType, path: str = "") -> Any:
    """``value`` (parsed JSON) as Python values Arrow builds ``type_`` from; raises
    :class:`Mismatch` naming the first field that does not fit."""
    if value is None:
        return None
    if pa.types.is_struct(type_):
        if not isinstance(value, dict):
            raise _fail(path, type_, value)
        return {f.name: conform(value.get(f.name), f.type, f"{path}.{f.name}" if path
                                else f.name) for f in type_}
    if pa.types.is_list(type_):
        if not isinstance(value, list):
            raise _fail(path, type_, value)
        return [conform(v, type_.value_type, f"{path}[{i}]") for i, v in enumerate(value)]
    if pa.types.is_map(type_):
        if not isinstance(value, dict):
            raise _fail(path, type_, value)
        return [(conform(k, type_.key_type, f"{path} key"),
                 conform(v, type_.item_type, f"{path}[{json.dumps(k)}]"))
                for k, v in value.items()]
    return _scalar(value, path, type_)
