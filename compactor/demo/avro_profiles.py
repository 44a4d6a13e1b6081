"""The demo's user profiles as Avro through a Schema Registry, the way a Confluent producer
writes them (confluent-kafka's own ``AvroSerializer``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace

from compactor.demo.workload import ProfileWorkload, Record

PROFILE_SCHEMA = {
    "type": "record", "name": "UserProfile", "namespace": "demo",
    "fields": [
        {"name": "user_id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "plan", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "version", "type": "string"},
    ],
}


class AvroProfiles:
    """Re-encodes the JSON profiles of :mod:`compactor.demo.workload` as Avro."""

    def __init__(self, registry_url: str, topic: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        client = SchemaRegistryClient({"url": registry_url})
        self._serialize = AvroSerializer(client, json.dumps(PROFILE_SCHEMA))
        self._ctx = SerializationContext(topic, MessageField.VALUE)

    def records(self, records: Iterable[Record]) -> list[Record]:
        """Keyed values as Avro; tombstones and null-key records (rejected anyway) as they are."""
        out = []
        for r in records:
            if r.key is not None and r.value is not None:
                r = replace(r, value=self._serialize(json.loads(r.value), self._ctx))
            out.append(r)
        return out

    def workload(self, workload: ProfileWorkload) -> ProfileWorkload:
        return replace(workload, records=tuple(self.records(workload.records)))
