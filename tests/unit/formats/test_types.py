"""Schemas to column types: Spark DDL, Avro and JSON Schema, and what has no column type."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compactor.formats.types import (
    TIMESTAMP,
    Untypable,
    avro_to_arrow,
    ddl_to_arrow,
    json_schema_to_arrow,
)


def test_ddl_nested_types() -> None:
    got = ddl_to_arrow("id BIGINT, name STRING, score DOUBLE, born DATE, "
                       "`order` INT, address STRUCT<city: STRING, zip INT>, "
                       "tags ARRAY<STRING>, attrs MAP<STRING, BIGINT>, price DECIMAL(10, 2)")
    assert got == pa.struct([
        ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
        ("born", pa.date32()), ("order", pa.int32()),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())),
        ("price", pa.decimal128(10, 2)),
    ])


@pytest.mark.parametrize("text, says", [
    ("id BIGGINT", "unknown type 'biggint'"),
    ("id INT,", "expected more"),
    ("id INT name STRING", "expected ',' or"),
    ("a STRUCT<b: INT", "expected ',' or '>'"),
    ("a INT, a STRING", "appears twice"),
    ("id BIGINT,, sku STRING", r"expected a field name but found ',' \(two commas in a row\?\)"),
    ("", "empty"),
])
def test_ddl_errors_say_where(text: str, says: str) -> None:
    with pytest.raises(Untypable, match=says):
        ddl_to_arrow(text)


def test_avro_records_unions_logical_types_and_named_references() -> None:
    schema = {"type": "record", "name": "User", "namespace": "ex", "fields": [
        {"name": "id", "type": "long"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["A", "B"]}},
        {"name": "home", "type": {"type": "record", "name": "Addr",
                                  "fields": [{"name": "city", "type": "string"}]}},
        {"name": "work", "type": ["null", "Addr"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 9, "scale": 2}},
    ]}
    addr = pa.struct([("city", pa.string())])
    assert avro_to_arrow(schema) == pa.struct([
        ("id", pa.int64()), ("email", pa.string()), ("at", TIMESTAMP), ("day", pa.date32()),
        ("tier", pa.string()), ("home", addr), ("work", addr),
        ("tags", pa.list_(pa.string())), ("amount", pa.decimal128(9, 2)),
    ])


def test_avro_union_of_several_types_has_no_column() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "v", "type": ["null", "int", "string"]}]}
    with pytest.raises(Untypable, match=r"value\.v: an Avro union of several types"):
        avro_to_arrow(schema)


def test_json_schema_objects_arrays_and_nullable() -> None:
    schema = {"type": "object", "properties": {
        "id": {"type": "integer"}, "name": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "geo": {"type": "object", "properties": {"lat": {"type": "number"}}},
    }}
    assert json_schema_to_arrow(schema) == pa.struct([
        ("id", pa.int64()), ("name", pa.string()), ("tags", pa.list_(pa.string())),
        ("geo", pa.struct([("lat", pa.float64())])),
    ])
    with pytest.raises(Untypable, match="without 'properties'"):
        json_schema_to_arrow({"type": "object"})
