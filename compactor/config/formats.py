"""The format keys: how each topic's keys and values are decoded, and the Schema Registry.

``key.format`` / ``value.format`` (plain for every topic, or ``topic.<name>.``): ``bytes``
(default), ``string``, ``json`` (with ``key.schema`` / ``value.schema``, a Spark DDL string),
``avro``, ``json-schema``, ``protobuf`` (Confluent wire format, with ``schema.registry.url``).
The registry client's own keys follow ``schema.registry.``
(``schema.registry.basic.auth.user.info``, ``schema.registry.ssl.ca.location``, ...) and are
checked by the client at load.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from compactor.config.keys import FORMAT_KEYS
from compactor.exceptions import ConfigError
from compactor.formats import FORMATS, RecordFormat, TopicFormat
from compactor.formats.types import Untypable, ddl_to_arrow

__all__ = ["FORMAT_KEYS", "REGISTRY_PREFIX", "require_registry_url", "topic_formats"]
REGISTRY_PREFIX = "schema.registry."


def _record_format(side: str, given: Mapping[str, tuple[str, str]]) -> RecordFormat:
    """``given``: format key -> (the key as written, its value)."""
    written, name = given.get(f"{side}.format", (f"{side}.format", "bytes"))
    name = name.strip().lower()
    if name not in FORMATS:
        raise ConfigError(written, name, "must be one of " + ", ".join(FORMATS))
    schema_key, schema = given.get(f"{side}.schema", (f"{side}.schema", ""))
    schema = schema.strip()
    if name == "json":
        if not schema:
            raise ConfigError(schema_key, schema, f"is required when {side}.format=json",
                              "give the fields as Spark DDL, for example "
                              f"{side}.schema=id BIGINT, name STRING, address STRUCT<city: STRING>")
        try:
            ddl_to_arrow(schema)
        except Untypable as exc:
            raise ConfigError(schema_key, schema, f"is not a Spark DDL schema: {exc}") from None
        return RecordFormat(name, schema)
    if schema and (schema_key.startswith("topic.") or not written.startswith("topic.")):
        # (a plain schema under a plain json format is not this topic's when the topic
        # overrides the format)
        raise ConfigError(schema_key, schema, f"is only read when {side}.format=json",
                          "registry formats take each record's schema from the registry")
    return RecordFormat(name)


def require_registry_url(registry: Mapping[str, str], why: str) -> None:
    """A registry format needs ``schema.registry.url``; ``why`` says which key asks for one."""
    if not registry.get("url"):
        raise ConfigError("schema.registry.url", "", f"is required: {why}",
                          "for example schema.registry.url=http://localhost:8081")


def _check_registry(conf: Mapping[str, str]) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    try:
        SchemaRegistryClient(dict(conf))
    except (ValueError, TypeError) as exc:
        raise ConfigError(REGISTRY_PREFIX + "*", ", ".join(sorted(conf)), str(exc),
                          "keys after 'schema.registry.' are the confluent-kafka "
                          "SchemaRegistryClient's (url, basic.auth.user.info, ssl.*)") from None


def topic_formats(topics: tuple[str, ...], plain: Mapping[str, str],
                  per_topic: Mapping[str, Mapping[str, str]],
                  registry: Mapping[str, str]) -> dict[str, TopicFormat]:
    """Each topic's formats: ``topic.<name>.<key>`` wins over ``<key>``."""
    for topic in per_topic:
        if topic not in topics:
            raise ConfigError(f"topic.{topic}.*", topic, "configures a topic that is not in "
                              "'topics'", f"topics={','.join(topics)}")
    registry_conf = MappingProxyType(dict(registry))
    formats: dict[str, TopicFormat] = {}
    for topic in topics:
        given = {k: (k, v) for k, v in plain.items()}
        given |= {k: (f"topic.{topic}.{k}", v) for k, v in per_topic.get(topic, {}).items()}
        fmt = TopicFormat(_record_format("key", given), _record_format("value", given),
                          registry_conf)
        for side, rf in (("key", fmt.key), ("value", fmt.value)):
            if rf.uses_registry:
                require_registry_url(registry, f"topic {topic} has {side}.format={rf.name}")
        formats[topic] = fmt
    if registry:
        _check_registry(registry)
    return formats
