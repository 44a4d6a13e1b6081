"""Column types: a Spark DDL string, an Avro schema or a JSON Schema, as an Arrow type.

Only types that Delta Lake can store come out: no unsigned integers, no time of day, no
unions of several types. Where a schema holds something without a Delta type, the mapping
raises :class:`Untypable` with the reason, and the records written with that schema go to
``L/T/rejected`` with it (the mirror never stops on a schema).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")


class Untypable(ValueError):
    """A schema holds a type the lake cannot store; the message says which and where."""


# ----------------------------------------------------------------------------------- Spark DDL

_DDL_PRIMITIVES = {
    "string": pa.string(), "varchar": pa.string(), "char": pa.string(),
    "boolean": pa.bool_(), "tinyint": pa.int8(), "byte": pa.int8(), "smallint": pa.int16(),
    "short": pa.int16(), "int": pa.int32(), "integer": pa.int32(), "bigint": pa.int64(),
    "long": pa.int64(), "float": pa.float32(), "real": pa.float32(), "double": pa.float64(),
    "date": pa.date32(), "timestamp": TIMESTAMP, "binary": pa.binary(),
}
_TOKEN = re.compile(r"\s*(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


class _DDL:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if match is None:
                raise Untypable(f"unexpected {text[pos:pos + 10]!r} at character {pos}")
            self.tokens.append(match.group(1))
            pos = match.end()
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token.lower() != expected):
            want = f"{expected!r}" if expected else "more"
            raise Untypable(f"expected {want} but found {token or 'the end'!r}")
        self.at += 1
        return token

    def name(self) -> str:
        token = self.take()
        if token in (",", ":", "<", ">", "(", ")"):
            raise Untypable(f"expected a field name but found {token!r}"
                            + (" (two commas in a row?)" if token == "," else ""))
        return token[1:-1] if token.startswith("`") else token

    def fields(self, closing: str) -> list[pa.Field]:
        fields = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.take()
            fields.append(pa.field(name, self.type()))
            if self.peek() == ",":
                self.take()
                continue
            if self.peek() == closing:
                return fields
            raise Untypable(f"expected ',' or {closing or 'the end'!r} after field {name!r}")

    def type(self) -> pa.DataType:
        word = self.take().lower()
        if word in ("struct", "array", "map"):
            self.take("<")
            if word == "struct":
                result: pa.DataType = pa.struct(self.fields(">"))
            elif word == "array":
                result = pa.list_(self.type())
            else:
                key = self.type()
                self.take(",")
                result = pa.map_(key, self.type())
            self.take(">")
            return result
        if word == "decimal":
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take()
                precision = int(self.take())
                if self.peek() == ",":
                    self.take()
                    scale = int(self.take())
                self.take(")")
            return pa.decimal128(precision, scale)
        if word in ("varchar", "char") and self.peek() == "(":
            self.take()
            self.take()
            self.take(")")
        if word not in _DDL_PRIMITIVES:
            raise Untypable(f"unknown type {word!r} (Spark DDL types: "
                            f"{', '.join(sorted(_DDL_PRIMITIVES))}, decimal, struct, array, map)")
        return _DDL_PRIMITIVES[word]


def ddl_to_arrow(text: str) -> pa.StructType:
    """``"id INT, name STRING, address STRUCT<city: STRING>"`` as an Arrow struct."""
    parser = _DDL(text)
    if not parser.tokens:
        raise Untypable("the schema is empty")
    fields = parser.fields("")
    if parser.peek():
        raise Untypable(f"unexpected {parser.peek()!r} after the last field")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise Untypable(f"a field name appears twice in {names}")
    return pa.struct(fields)


# ----------------------------------------------------------------------------------------- Avro

_AVRO_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
    "string": pa.string(),
}


def avro_to_arrow(schema: Any, named: dict[str, pa.DataType] | None = None,
                  where: str = "value") -> pa.DataType:
    """An Avro schema (parsed JSON) as an Arrow type; records become structs."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise Untypable(f"{where}: unknown Avro type {schema!r}")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return avro_to_arrow(branches[0], named, where)
        raise Untypable(f"{where}: an Avro union of several types ({', '.join(map(str, schema))})"
                        " has no column type")
    kind = schema.get("type")
    logical = schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                   "local-timestamp-micros"):
        return TIMESTAMP
    if logical == "date":
        return pa.date32()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "record":
        fields = [pa.field(f["name"], avro_to_arrow(f["type"], named, f"{where}.{f['name']}"))
                  for f in schema.get("fields", [])]
        result: pa.DataType = pa.struct(fields)
        named[schema["name"]] = result
        if "namespace" in schema:
            named[f"{schema['namespace']}.{schema['name']}"] = result
        return result
    if kind == "enum":
        named[schema["name"]] = pa.string()
        return pa.string()
    if kind == "fixed":
        named[schema["name"]] = pa.binary()
        return pa.binary()
    if kind == "array":
        return pa.list_(avro_to_arrow(schema["items"], named, f"{where}[]"))
    if kind == "map":
        return pa.map_(pa.string(), avro_to_arrow(schema["values"], named, f"{where}{{}}"))
    return avro_to_arrow(kind, named, where)


# ---------------------------------------------------------------------------------- JSON Schema

_JSON_PRIMITIVES = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
                    "boolean": pa.bool_()}


def json_schema_to_arrow(schema: Any, where: str = "value") -> pa.DataType:
    """A JSON Schema as an Arrow type: objects with ``properties`` become structs."""
    if not isinstance(schema, dict):
        raise Untypable(f"{where}: a JSON Schema must be an object, not {schema!r}")
    kind = schema.get("type")
    if isinstance(kind, list):
        branches = [k for k in kind if k != "null"]
        if len(branches) != 1:
            raise Untypable(f"{where}: a JSON Schema of several types {kind} has no column type")
        kind = branches[0]
    for combinator in ("oneOf", "anyOf"):
        if kind is None and combinator in schema:
            branches = [b for b in schema[combinator] if b.get("type") != "null"]
            if len(branches) != 1:
                raise Untypable(f"{where}: {combinator} of several schemas has no column type")
            return json_schema_to_arrow(branches[0], where)
    if kind == "object":
        props = schema.get("properties")
        if not props:
            raise Untypable(f"{where}: an object without 'properties' has no column type")
        return pa.struct([pa.field(name, json_schema_to_arrow(sub, f"{where}.{name}"))
                          for name, sub in props.items()])
    if kind == "array":
        return pa.list_(json_schema_to_arrow(schema.get("items", {}), f"{where}[]"))
    if kind == "string" and schema.get("format") == "date-time":
        return pa.string()  # kept as the text the producer wrote: zones vary per record
    if kind in _JSON_PRIMITIVES:
        return _JSON_PRIMITIVES[kind]
    raise Untypable(f"{where}: JSON Schema type {kind!r} has no column type")
