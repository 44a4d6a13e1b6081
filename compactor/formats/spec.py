"""What the configuration says about a topic's formats, as frozen values tasks can carry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FORMATS = ("bytes", "string", "json", "avro", "json-schema", "protobuf")
REGISTRY_FORMATS = frozenset({"avro", "json-schema", "protobuf"})


@dataclass(frozen=True)
class RecordFormat:
    """The format of a topic's keys or of its values."""

    name: str = "bytes"
    schema: str | None = None  # json: the declared Spark DDL schema

    @property
    def typed(self) -> bool:
        return self.name != "bytes"

    @property
    def uses_registry(self) -> bool:
        return self.name in REGISTRY_FORMATS


@dataclass(frozen=True)
class TopicFormat:
    """A topic's key and value formats and the registry client's settings."""

    key: RecordFormat = field(default_factory=RecordFormat)
    value: RecordFormat = field(default_factory=RecordFormat)
    registry: Mapping[str, str] = field(default_factory=dict)  # confluent client conf

    @property
    def typed(self) -> bool:
        return self.key.typed or self.value.typed

    @property
    def registry_url(self) -> str:
        return self.registry.get("url", "")
