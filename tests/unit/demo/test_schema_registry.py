"""The embedded Schema Registry against confluent-kafka's own client and serializers."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from compactor.demo.schema_registry import EmbeddedSchemaRegistry, check_compatible

V1 = {"type": "record", "name": "U", "fields": [{"name": "id", "type": "int"}]}
V2 = {"type": "record", "name": "U", "fields": [
    {"name": "id", "type": "int"}, {"name": "c", "type": "string", "default": ""}]}
NO_DEFAULT = {"type": "record", "name": "U", "fields": [
    {"name": "id", "type": "int"}, {"name": "c", "type": "string"}]}
RETYPED = {"type": "record", "name": "U", "fields": [{"name": "id", "type": "string"}]}


@pytest.mark.parametrize("level, new, ok", [
    ("BACKWARD", V2, True), ("BACKWARD", NO_DEFAULT, False), ("BACKWARD", RETYPED, False),
    ("FORWARD", NO_DEFAULT, True), ("FULL", NO_DEFAULT, False), ("NONE", RETYPED, True),
])
def test_avro_compatibility(level: str, new: dict, ok: bool) -> None:
    assert (check_compatible(level, json.dumps(new), [json.dumps(V1)], "AVRO") is None) == ok


def test_serializers_round_trip_and_errors_carry_confluent_codes() -> None:
    with EmbeddedSchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        ctx = SerializationContext("users", MessageField.VALUE)
        first = AvroSerializer(client, json.dumps(V1))({"id": 1}, ctx)
        second = AvroSerializer(client, json.dumps(V2))({"id": 2, "c": "DE"}, ctx)
        assert first[:5] == b"\x00\x00\x00\x00\x01" and second[:5] == b"\x00\x00\x00\x00\x02"
        reader = AvroDeserializer(client)
        assert reader(first, ctx) == {"id": 1} and reader(second, ctx) == {"id": 2, "c": "DE"}
        with pytest.raises(SchemaRegistryError) as refused:
            AvroSerializer(client, json.dumps(RETYPED))({"id": "x"}, ctx)
        assert refused.value.http_status_code == 409
        with pytest.raises(SchemaRegistryError) as missing:
            client.get_schema(99)
        assert missing.value.error_code == 40403
        assert client.get_latest_version("users-value").version == 2
