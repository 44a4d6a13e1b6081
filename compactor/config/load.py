"""Reading and validating a properties file into a :class:`CompactorConfig`, once."""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from compactor.config.formats import (
    FORMAT_KEYS,
    REGISTRY_PREFIX,
    require_registry_url,
    topic_formats,
)
from compactor.config.keys import (
    BROKER_ALIASES,
    CLEANER_KEYS,
    KNOWN_KEYS,
    PIPELINE_KEYS,
    TOPIC_KEYS,
    TOPIC_NAME,
    at_least,
    parse_int,
    parse_value,
)
from compactor.config.model import (
    DOWNSTREAM_KEY_FORMATS,
    CleanerConfig,
    CompactorConfig,
    DownstreamTable,
)
from compactor.config.properties import load_properties
from compactor.config.providers import resolve_references
from compactor.config.resolve import resolve_topic
from compactor.exceptions import ConfigError
from compactor.formats import TopicFormat
from compactor.formats.spec import REGISTRY_FORMATS
from compactor.kafka.client_config import check_with_librdkafka, translate_java_keys
from compactor.lake.storage import REMOTE_SCHEMES, Storage, is_local, scheme


def _check_lake_uri(key: str, uri: str) -> None:
    if not is_local(uri) and scheme(uri) not in REMOTE_SCHEMES:
        raise ConfigError(
            key, uri, "must be a local path, a file:// URI or object storage "
            f"({', '.join(s + '://' for s in REMOTE_SCHEMES)})",
            "see 'Object storage' in docs/deployment.md")


_DOWNSTREAM_KEY = re.compile(
    r"^downstream\.([A-Za-z0-9_-]+)\.(path|topic|key\.column|key\.format|stats\.columns)$")


def _downstream(raw: Mapping[str, str], topics: tuple[str, ...],
                formats: Mapping[str, TopicFormat]) -> tuple[DownstreamTable, ...]:
    groups: dict[str, dict[str, str]] = {}
    for key, value in raw.items():
        match = _DOWNSTREAM_KEY.match(key)
        if match:
            groups.setdefault(match.group(1), {})[match.group(2)] = value.strip()
    tables = []
    for name, attrs in sorted(groups.items()):
        for required in ("path", "topic", "key.column"):
            if not attrs.get(required):
                raise ConfigError(f"downstream.{name}.{required}", None, "is required",
                                  "a downstream table needs path, topic and key.column")
        if attrs["topic"] not in topics:
            raise ConfigError(f"downstream.{name}.topic", attrs["topic"],
                              "is not one of the mirrored topics", f"topics={','.join(topics)}")
        _check_lake_uri(f"downstream.{name}.path", attrs["path"])
        given = attrs.get("key.format", "string")
        fmt, _, field_name = given.partition(":")
        if fmt not in DOWNSTREAM_KEY_FORMATS or (fmt == "json" and not field_name) or (
                fmt in ("bytes", "string") and field_name):
            raise ConfigError(f"downstream.{name}.key.format", given,
                              "must be bytes, string, json:<field>, or avro, json-schema or "
                              "protobuf (each optionally :<field>)")
        registry = formats[attrs["topic"]].registry
        if fmt in REGISTRY_FORMATS:
            require_registry_url(registry, f"downstream.{name}.key.format={given} reads keys "
                                 "through the registry")
        free = tuple(c.strip() for c in attrs.get("stats.columns", "").split(",") if c.strip())
        if attrs["key.column"] in free:
            raise ConfigError(f"downstream.{name}.stats.columns", attrs["stats.columns"],
                              f"names the key column {attrs['key.column']!r}",
                              "a key is personal data: its erased values would stay in the "
                              "table's transaction log")
        tables.append(DownstreamTable(name, attrs["topic"], attrs["path"], attrs["key.column"],
                                      fmt, field_name or None, registry, free))
    return tuple(tables)


def _unknown(key: str, value: str) -> ConfigError:
    close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else "see conf/example.properties for the keys"
    return ConfigError(key, value, "is not a known configuration key", hint)


def _split_topic_key(key: str) -> tuple[str, str] | None:
    """``topic.orders.v1.segment.ms`` -> (``orders.v1``, ``segment.ms``); topic names hold dots."""
    rest = key[len("topic.") :]
    for name in sorted([*TOPIC_KEYS, *FORMAT_KEYS], key=len, reverse=True):
        if rest.endswith("." + name) and len(rest) > len(name) + 1:
            return rest[: -len(name) - 1], name
    return None


def _topics(raw: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not names:
        raise ConfigError("topics", raw, "must name at least one topic (comma-separated)")
    for name in names:
        if not TOPIC_NAME.match(name) or name in (".", ".."):
            raise ConfigError(
                "topics", name, "is not a legal Kafka topic name ([A-Za-z0-9._-], 1-249 chars)"
            )
    if len(set(names)) != len(names):
        raise ConfigError("topics", raw, "names a topic twice")
    return names


@dataclass
class _Sorted:
    """The file's keys sorted by family, each value parsed and checked against its rule."""

    pipeline: dict[str, Any] = field(default_factory=dict)
    kafka: dict[str, str] = field(default_factory=dict)
    spark: dict[str, str] = field(default_factory=lambda: {"spark.master": "local[*]"})
    storage: dict[str, str] = field(default_factory=dict)
    cleaner: dict[str, Any] = field(default_factory=dict)
    # "" -> every topic, a topic name -> that topic, "log" -> broker-wide defaults
    layers: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}, "log": {}})
    broker_raw: dict[str, str] = field(default_factory=dict)
    formats: dict[str, str] = field(default_factory=dict)  # key.format etc. for every topic
    topic_formats: dict[str, dict[str, str]] = field(default_factory=dict)
    registry: dict[str, str] = field(default_factory=dict)  # schema.registry.* less prefix


def _group_for(lake: str) -> str:
    """The mirror's consumer group by default: named after its lake, unique per lake path."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", lake.rstrip("/").rsplit("/", 1)[-1]) or "lake"
    return f"compactor-{name}-{hashlib.sha256(lake.encode()).hexdigest()[:8]}"


def _sort_keys(raw: Mapping[str, str]) -> _Sorted:
    """Sort every key into its family (step 1); an unknown key is refused with the closest
    match."""
    out = _Sorted()
    for key, value in raw.items():
        if key.startswith("kafka."):
            out.kafka[key[len("kafka.") :]] = value
        elif key.startswith("spark."):
            out.spark[key] = value
        elif key.startswith(REGISTRY_PREFIX):
            out.registry[key[len(REGISTRY_PREFIX) :]] = value.strip()
        elif key in FORMAT_KEYS:
            out.formats[key] = value
        elif key.startswith("lake.storage."):
            out.storage[key[len("lake.storage.") :]] = value
        elif key.startswith("topic."):
            split = _split_topic_key(key)
            if split is None:
                raise _unknown(key, value)
            topic, name = split
            if name in FORMAT_KEYS:
                out.topic_formats.setdefault(topic, {})[name] = value
                continue
            spec = TOPIC_KEYS[name]
            out.layers.setdefault(topic, {})[name] = parse_value(
                key, value, spec.parse, spec.check)
        elif key in TOPIC_KEYS:
            spec = TOPIC_KEYS[key]
            out.layers[""][key] = parse_value(key, value, spec.parse, spec.check)
        elif key in CLEANER_KEYS:
            spec = CLEANER_KEYS[key]
            out.cleaner[spec.field] = parse_value(key, value, spec.parse, spec.check)
        elif key in PIPELINE_KEYS:
            spec = PIPELINE_KEYS[key]
            out.pipeline[key] = parse_value(key, value, spec.parse, spec.check)
        elif key in KNOWN_KEYS:
            out.broker_raw[key] = value
        elif not _DOWNSTREAM_KEY.match(key):  # downstream keys are read once topics are known
            raise _unknown(key, value)
    return out


def _broker_defaults(broker_raw: Mapping[str, str]) -> dict[str, Any]:
    """The broker-wide ``log.*`` keys as defaults of the topic keys they stand for (step 2)."""
    defaults: dict[str, Any] = {}
    for name, spec in TOPIC_KEYS.items():
        if spec.broker_key in broker_raw:
            defaults[name] = parse_value(
                spec.broker_key, broker_raw[spec.broker_key], spec.parse, spec.check
            )
            continue
        for alias, factor in BROKER_ALIASES.get(spec.broker_key, ()):
            if alias in broker_raw:
                hours_or_minutes = parse_value(alias, broker_raw[alias], parse_int, at_least(-1))
                scaled = hours_or_minutes * factor if hours_or_minutes >= 0 else -1
                defaults[name] = parse_value(alias, str(scaled), spec.parse, spec.check)
                break
    return defaults


def _pipeline(given: Mapping[str, Any], layers: Mapping[str, Any]) -> dict[str, Any]:
    """The pipeline's keys with their defaults, required ones present, rules kept (step 3)."""
    pipeline = dict(given)
    for key, spec in PIPELINE_KEYS.items():
        if key not in pipeline:
            if spec.default is None:
                raise ConfigError(key, None, "is required", f"add '{key}=...' to the config file")
            pipeline[key] = spec.default
    topics = _topics(pipeline["topics"])
    for topic in layers:
        if topic not in ("", "log") and topic not in topics:
            raise ConfigError(
                f"topic.{topic}.*", topic, "configures a topic that is not in 'topics'",
                f"add it to topics= or remove the line; topics={','.join(topics)}",
            )
    pipeline["topics"] = topics
    if pipeline["starting.offsets"] not in ("earliest", "latest"):
        raise ConfigError("starting.offsets", pipeline["starting.offsets"],
                          "must be 'earliest' or 'latest'")
    if not pipeline["bootstrap.servers"]:
        raise ConfigError("bootstrap.servers", "", "must name at least one host:port")
    lake = pipeline["lake.path"]
    if not lake:
        raise ConfigError("lake.path", "", "must be a directory path or URI")
    _check_lake_uri("lake.path", lake)
    if not is_local(lake) and not pipeline["checkpoint.path"]:
        raise ConfigError(
            "checkpoint.path", "", f"must be set when lake.path is object storage ({lake})",
            "give a local directory, or a URI your Spark's Hadoop can write (hdfs://, or "
            "s3a:// with the hadoop-aws jars on the classpath); see 'Object storage' in "
            "docs/deployment.md")
    if not pipeline["checkpoint.path"] and "checkpoints" in topics:
        raise ConfigError("checkpoint.path", "", "must be set when a topic is named 'checkpoints'",
                          "the default <lake.path>/checkpoints would share its directory")
    pipeline["checkpoint.path"] = pipeline["checkpoint.path"] or str(Path(lake) / "checkpoints")
    return pipeline


def build_config(raw: Mapping[str, str]) -> CompactorConfig:
    """Validate a flat key/value mapping (a parsed file plus CLI overrides).

    Steps: sort and parse every key (1), broker-wide defaults (2), the pipeline's keys (3),
    the ``kafka.*`` keys made librdkafka's and checked by it (4), then the file's own topic
    layers are resolved once, so a conflict between them fails before any broker is
    contacted.
    """
    keys = _sort_keys(raw)
    keys.layers["log"] = _broker_defaults(keys.broker_raw)
    pipeline = _pipeline(keys.pipeline, keys.layers)
    keys.kafka = translate_java_keys(keys.kafka)
    keys.kafka.setdefault("isolation.level", "read_committed")
    check_with_librdkafka(keys.kafka)
    topics = pipeline["topics"]
    formats = topic_formats(topics, keys.formats, keys.topic_formats, keys.registry)
    pipeline["group.id"] = pipeline["group.id"] or _group_for(pipeline["lake.path"])
    config = CompactorConfig(
        **{spec.field: pipeline[name] for name, spec in PIPELINE_KEYS.items()},
        kafka=MappingProxyType(keys.kafka),
        spark=MappingProxyType(keys.spark),
        storage=Storage(MappingProxyType(keys.storage)),
        cleaner=CleanerConfig(**keys.cleaner),
        topic_layers=MappingProxyType({k: MappingProxyType(v) for k, v in keys.layers.items()}),
        downstream=_downstream(raw, topics, formats),
        formats=MappingProxyType(formats),
    )
    for topic in topics:
        resolve_topic(config, topic, {})
    return config


def load_config(path: str | Path, overrides: Mapping[str, str] | None = None) -> CompactorConfig:
    """Read and validate a properties file; ``overrides`` (from the CLI) win over the file.

    ``${env:NAME}`` and ``${file:PATH}`` references are resolved here, at the boundary
    (:mod:`compactor.config.providers`); the config keeps them as written for display.
    """
    raw = load_properties(path)
    raw.update(overrides or {})
    values, written = resolve_references(raw)
    return replace(build_config(values), written=MappingProxyType(written))
