"""Decoding a column of Kafka keys or values into typed Arrow values, record by record.

The result keeps every row: a row that decoded has its value in the group of its writer
schema; a row that did not has the reason (and the schema id it named, if any). Registry
formats are read with confluent-kafka's own deserializers, so a record decodes here exactly
when a Confluent consumer would decode it. The registry client caches schemas by id: a
schema is fetched once per process.

How a failure is classified, so that a registry outage never rejects good records:

1. The Confluent framing (magic byte 0, then a 4-byte schema id) is checked; a record without
   it is rejected ("not in the Schema Registry wire format").
2. The schema is fetched by id. A 404 from the registry rejects the record ("unknown schema
   id"); any other failure to get an answer raises
   :class:`~compactor.formats.exceptions.SchemaRegistryUnavailableError`, which fails the
   micro-batch before anything is committed.
3. With the schema in the client's cache, the deserializer runs; whatever it raises now is
   about the record's bytes and rejects the record.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from compactor.formats.exceptions import SchemaRegistryUnavailableError
from compactor.formats.json_values import Mismatch, conform
from compactor.formats.protobuf import ProtobufReader, message_to_arrow
from compactor.formats.reasons import quoting
from compactor.formats.spec import RecordFormat
from compactor.formats.types import (
    Untypable,
    avro_to_arrow,
    ddl_to_arrow,
    json_schema_to_arrow,
)

_MAGIC = 0


@dataclass
class Group:
    """The rows decoded with one writer schema (or with the declared schema)."""

    schema_id: int | None
    type: pa.DataType
    rows: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    _array: pa.Array | None = field(default=None, repr=False)

    def array(self) -> pa.Array:
        """The values as one Arrow array, built once (the type check builds it first)."""
        if self._array is None:
            self._array = pa.array(self.values, type=self.type)
        return self._array


@dataclass
class Decoded:
    """A decoded column: groups of rows per writer schema, and why the others failed."""

    groups: list[Group]
    reasons: list[str | None]  # per input row; None = decoded (or a null input)
    schema_ids: list[int | None]  # per input row: the id its framing named


def _fits(value: Any, type_: pa.DataType) -> str | None:
    try:
        pa.array([value], type=type_)
        return None
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError) as exc:
        return str(exc)


class Decoder:
    """Decodes the keys (``is_key``) or values of one topic; one per task or driver step."""

    def __init__(self, fmt: RecordFormat, registry: dict[str, str] | None, topic: str,
                 is_key: bool) -> None:
        self.format = fmt
        self.topic = topic
        self.side = "key" if is_key else "value"
        self._declared = ddl_to_arrow(fmt.schema) if fmt.name == "json" and fmt.schema else None
        # writer -> type, or why it has none. A writer is a schema id; for Protobuf, a schema
        # id and the message indexes that pick a message type in it.
        self._types: dict[Hashable, pa.DataType | str] = {}
        self._protobuf: ProtobufReader | None = None
        self._client: Any = None
        self._deserializer: Any = None
        self._ctx: Any = None
        self._url = (registry or {}).get("url", "")
        if fmt.uses_registry:
            self._setup_registry(dict(registry or {}), is_key)

    def _setup_registry(self, conf: dict[str, str], is_key: bool) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.serialization import MessageField, SerializationContext

        self._client = SchemaRegistryClient(conf)
        self._ctx = SerializationContext(self.topic, MessageField.KEY if is_key
                                         else MessageField.VALUE)
        if self.format.name == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            self._deserializer = AvroDeserializer(self._client)
        elif self.format.name == "json-schema":
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            self._deserializer = JSONDeserializer(None, schema_registry_client=self._client)
        elif self.format.name == "protobuf":
            self._protobuf = ProtobufReader(self._client, self._ctx)
        else:  # refused at load (compactor.config); kept out of the decoder's paths
            raise ValueError(f"format {self.format.name!r} cannot be decoded")

    # ------------------------------------------------------------------ registry schemas

    def _writer_type(self, writer: Hashable, schema_id: int) -> pa.DataType:
        if self._protobuf is not None:
            assert isinstance(writer, tuple)
            return message_to_arrow(self._protobuf.message_type(schema_id, writer[1]))
        doc = json.loads(self._client.get_schema(schema_id).schema_str)
        if self.format.name == "avro":
            return avro_to_arrow(doc, where=self.side)
        return json_schema_to_arrow(doc, where=self.side)

    def _schema_type(self, writer: Hashable, schema_id: int) -> pa.DataType | str:
        """The Arrow type of a writer schema, or the reason it has none (step 2)."""
        known = self._types.get(writer)
        if known is not None:
            return known
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            result: pa.DataType | str = self._writer_type(writer, schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code != 404:
                raise SchemaRegistryUnavailableError.at(self._url, exc) from exc
            result = f"unknown schema id {schema_id} (the registry at {self._url} has no such id)"
        except Untypable as exc:
            result = f"schema id {schema_id} has no column type: {exc}"
        except Exception as exc:  # httpx errors: the registry did not answer
            raise SchemaRegistryUnavailableError.at(self._url, exc) from exc
        self._types[writer] = result
        return result

    def _registry_one(self, data: bytes) -> tuple[Hashable, int | None, Any, str | None]:
        """(writer, schema id, value, why it did not decode)."""
        if len(data) < 5 or data[0] != _MAGIC:
            first = f"the first byte is 0x{data[0]:02x}" if data else "no bytes"
            return None, None, None, quoting(
                "not in the Schema Registry wire format: no magic byte 0x00 and schema id "
                f"first (was it produced with a Confluent {self.format.name} serializer?)",
                first)
        schema_id = int.from_bytes(data[1:5], "big")
        writer: Hashable = schema_id
        if self._protobuf is not None:
            try:
                writer = (schema_id, self._protobuf.framing(data)[1])
            except ValueError as exc:
                return None, schema_id, None, str(exc)
        type_ = self._schema_type(writer, schema_id)
        if isinstance(type_, str):
            return writer, schema_id, None, type_
        try:
            if self._protobuf is not None:
                assert isinstance(writer, tuple)
                value = self._protobuf.decode(data, schema_id, writer[1])
            else:
                value = self._deserializer(data, self._ctx)
        except Exception as exc:  # the schema is cached: this is about the record's bytes
            return writer, schema_id, None, quoting(
                f"cannot be decoded with schema id {schema_id}: {type(exc).__name__}", str(exc))
        return writer, schema_id, value, None

    # --------------------------------------------------------------------------- decoding

    def _one(self, data: bytes) -> tuple[Hashable, int | None, Any, str | None]:
        name = self.format.name
        if self.format.uses_registry:
            return self._registry_one(data)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return None, None, None, quoting("not UTF-8 text", str(exc))
        if name == "string":
            return None, None, text, None
        try:
            doc = json.loads(text)
        except ValueError as exc:
            return None, None, None, f"not valid JSON: {exc}"
        if not isinstance(doc, dict):
            return None, None, None, (f"a JSON {type(doc).__name__}, but the declared schema "
                                      f"({self.side}.schema) is a record")
        if self._declared is not None:
            try:
                doc = conform(doc, self._declared)
            except Mismatch as exc:
                return None, None, None, (f"does not match the declared schema "
                                          f"({self.side}.schema): {exc}")
        return None, None, doc, None

    def _type_of(self, writer: Hashable) -> pa.DataType:
        if writer is not None:
            found = self._types[writer]
            assert not isinstance(found, str)
            return found
        if self._declared is not None:
            return self._declared
        return pa.string()

    def decode(self, column: pa.Array | pa.ChunkedArray) -> Decoded:
        """Decode every non-null entry of ``column`` (binary)."""
        items = column.to_pylist()
        reasons: list[str | None] = [None] * len(items)
        schema_ids: list[int | None] = [None] * len(items)
        groups: dict[Hashable, Group] = {}
        for row, data in enumerate(items):
            if data is None:
                continue
            writer, schema_id, value, reason = self._one(data)
            schema_ids[row] = schema_id
            if reason is None:
                group = groups.get(writer)
                if group is None:
                    group = groups[writer] = Group(schema_id, self._type_of(writer))
                group.rows.append(row)
                group.values.append(value)
            else:
                reasons[row] = reason
        for group in groups.values():
            self._check_types(group, reasons)
        return Decoded([g for g in groups.values() if g.rows], reasons, schema_ids)

    def _check_types(self, group: Group, reasons: list[str | None]) -> None:
        """Drop from ``group`` the values its column type cannot hold (a JSON value that
        does not match the declared schema), with the reason. Cheap when all fit."""
        if _fits_all(group):
            return
        keep_rows, keep_values = [], []
        for row, value in zip(group.rows, group.values, strict=True):
            problem = _fits(value, group.type)
            if problem is not None:  # name the field: Arrow's message does not
                try:
                    conform(value, group.type)
                except Mismatch as exc:
                    problem = str(exc)
            if problem is None:
                keep_rows.append(row)
                keep_values.append(value)
            else:
                what = (f"the declared schema ({self.side}.schema)" if group.schema_id is None
                        else f"the column type of schema id {group.schema_id}")
                reasons[row] = f"does not match {what}: {problem}"
        group.rows, group.values, group._array = keep_rows, keep_values, None


def _fits_all(group: Group) -> bool:
    try:
        group.array()
        return True
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return False
