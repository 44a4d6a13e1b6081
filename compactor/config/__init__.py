"""The one configuration object, validated once at load.

Keys carry Kafka's names and defaults. A topic config value is taken from the first of:

1. ``topic.<name>.<key>`` in the file (one topic),
2. ``<key>`` in the file (every mirrored topic),
3. the topic's own config on the broker (DescribeConfigs),
4. the broker-wide ``log.*`` key in the file,
5. Kafka's default.

Everything below this module receives a :class:`CompactorConfig` and never a raw dictionary.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from compactor.config.properties import load_properties
from compactor.exceptions import ConfigError
from compactor.lake.storage import LOCAL, REMOTE_SCHEMES, Storage, is_local, scheme

LONG_MAX = 2**63 - 1
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

Check = Callable[[Any], str | None]


def _at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"must be >= {low:g}"


def _between(low: float, high: float) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low:g} and {high:g}"


def _any(_: Any) -> str | None:
    return None


def _policy(value: str) -> frozenset[str]:
    parts = frozenset(p.strip() for p in value.split(",") if p.strip())
    if not parts or not parts <= {"compact", "delete"}:
        raise ValueError("must be 'compact', 'delete' or 'compact,delete'")
    return parts


def _bool(value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError("must be true or false")


def _int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError("must be a whole number") from None


def _float(value: str) -> float:
    try:
        result = float(value.strip())
    except ValueError:
        raise ValueError("must be a number") from None
    if math.isnan(result):
        raise ValueError("must be a number")
    return result


@dataclass(frozen=True)
class _Topic:
    """A per-topic key: its parser, rule, Kafka default and broker-wide ``log.*`` name."""

    parse: Callable[[str], Any]
    check: Check
    default: Any
    broker_key: str


TOPIC_KEYS: Mapping[str, _Topic] = {
    "cleanup.policy": _Topic(_policy, _any, frozenset({"delete"}), "log.cleanup.policy"),
    "segment.bytes": _Topic(_int, _at_least(14), 1073741824, "log.segment.bytes"),
    "segment.ms": _Topic(_int, _at_least(1), 604800000, "log.roll.ms"),
    "min.cleanable.dirty.ratio": _Topic(
        _float, _between(0, 1), 0.5, "log.cleaner.min.cleanable.ratio"
    ),
    "min.compaction.lag.ms": _Topic(_int, _at_least(0), 0, "log.cleaner.min.compaction.lag.ms"),
    "max.compaction.lag.ms": _Topic(
        _int, _at_least(1), LONG_MAX, "log.cleaner.max.compaction.lag.ms"
    ),
    "delete.retention.ms": _Topic(_int, _at_least(0), 86400000, "log.cleaner.delete.retention.ms"),
    "retention.ms": _Topic(_int, _at_least(-1), 604800000, "log.retention.ms"),
    "retention.bytes": _Topic(_int, _at_least(-1), -1, "log.retention.bytes"),
    # Not a Kafka key: how long files removed from the log stay on disk for readers of older
    # snapshots before vacuum deletes them. -1 = min(1 hour, max.compaction.lag.ms / 4).
    "vacuum.grace.ms": _Topic(_int, _at_least(-1), -1, "log.cleaner.vacuum.grace.ms"),
}
# Kafka's coarser broker keys, used when the *.ms key is absent (ms wins, then minutes, hours).
_BROKER_ALIASES: Mapping[str, tuple[tuple[str, int], ...]] = {
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
}

# Broker-wide cleaner keys: name -> (parser, rule, Kafka default).
CLEANER_KEYS: Mapping[str, tuple[Callable[[str], Any], Check, Any]] = {
    "log.cleaner.enable": (_bool, _any, True),
    "log.cleaner.threads": (_int, _at_least(1), 1),
    "log.cleaner.backoff.ms": (_int, _at_least(0), 15000),
    "log.cleaner.dedupe.buffer.size": (_int, _at_least(24), 134217728),
    "log.cleaner.io.buffer.load.factor": (_float, _between(0.01, 1), 0.9),
    "log.cleaner.io.max.bytes.per.second": (_float, _at_least(1), math.inf),
}

# The pipeline's own keys: name -> (parser, rule, default; None = required).
PIPELINE_KEYS: Mapping[str, tuple[Callable[[str], Any], Check, Any]] = {
    "bootstrap.servers": (str.strip, _any, None),
    "topics": (str, _any, None),
    "lake.path": (str.strip, _any, None),
    "checkpoint.path": (str.strip, _any, ""),
    "trigger.interval.ms": (_int, _at_least(0), 5000),
    "max.offsets.per.trigger": (_int, _at_least(1), 0),
    "starting.offsets": (str.strip, _any, "earliest"),
    "fail.on.data.loss": (_bool, _any, True),
    # 0: MERGE the latest-value table after every micro-batch; N: at most every N ms.
    "table.merge.interval.ms": (_int, _at_least(0), 0),
    # Prometheus metrics of 'compactor run' on this port (0 = off).
    "metrics.port": (_int, _between(0, 65535), 0),
}
_BROKER_ONLY = {k for aliases in _BROKER_ALIASES.values() for k, _ in aliases}
KNOWN_KEYS = frozenset(
    set(TOPIC_KEYS)
    | {t.broker_key for t in TOPIC_KEYS.values()}
    | _BROKER_ONLY
    | set(CLEANER_KEYS)
    | set(PIPELINE_KEYS)
)


@dataclass(frozen=True)
class TopicConfig:
    """The effective Kafka topic configuration of one mirrored topic."""

    name: str
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    vacuum_grace: int = -1
    # key -> where its value came from: "topic override", "file", "broker", "broker default",
    # "kafka default". Shown by describe-config.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def vacuum_grace_ms(self) -> int:
        """The vacuum grace; by default it leaves three quarters of the max lag for the rest."""
        if self.vacuum_grace >= 0:
            return self.vacuum_grace
        return min(3_600_000, self.max_compaction_lag_ms // 4)

    @property
    def erasure_deadline(self) -> bool:
        """A compacted topic with a max lag promises physical erasure within it."""
        return self.compact and self.max_compaction_lag_ms < LONG_MAX

    @property
    def pass_allowance_ms(self) -> int:
        """Time reserved inside the deadline for waking up, a cleaning pass, its commit, and
        the micro-batch commits it may wait behind (measured: up to 3 s with M = 10 s)."""
        return max(3000, self.max_compaction_lag_ms // 5)

    @property
    def cleaning_lag_ms(self) -> int:
        """When a dirty record must be cleaned so that it is *physically* gone by the max lag.

        Planned backwards from max.compaction.lag.ms = M: vacuum needs the grace G after the
        cleaning commit, and the pass itself an allowance A, so cleaning is forced at
        M - G - A. Without a max lag this is Kafka's (infinite) max lag.
        """
        if not self.erasure_deadline:
            return self.max_compaction_lag_ms
        return self.max_compaction_lag_ms - self.vacuum_grace_ms - self.pass_allowance_ms

    @property
    def roll_ms(self) -> int:
        """KIP-354: a compacted topic with a max lag rolls by min(segment.ms, cleaning lag)."""
        if self.erasure_deadline:
            return min(self.segment_ms, self.cleaning_lag_ms)
        return self.segment_ms


@dataclass(frozen=True)
class DownstreamTable:
    """A Delta table derived from a topic, whose rows each tombstone must delete."""

    name: str
    topic: str
    path: str
    key_column: str
    key_format: str = "string"  # bytes | string | json
    json_field: str | None = None

    def key_value(self, key: bytes) -> object | None:
        """The table's key for a Kafka key; None when the key cannot map (never deletes)."""
        if self.key_format == "bytes":
            return key
        try:
            text = key.decode("utf-8")
            if self.key_format == "string":
                return text
            import json

            doc = json.loads(text)
            return doc.get(self.json_field) if isinstance(doc, dict) else None
        except (UnicodeDecodeError, ValueError):
            return None


def _check_lake_uri(key: str, uri: str) -> None:
    if not is_local(uri) and scheme(uri) not in REMOTE_SCHEMES:
        raise ConfigError(
            key, uri, "must be a local path, a file:// URI or object storage "
            f"({', '.join(s + '://' for s in REMOTE_SCHEMES)})",
            "see 'Object storage' in the README")


_DOWNSTREAM_KEY = re.compile(
    r"^downstream\.([A-Za-z0-9_-]+)\.(path|topic|key\.column|key\.format)$")


def _downstream(raw: Mapping[str, str], topics: tuple[str, ...]) -> tuple[DownstreamTable, ...]:
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
        fmt = attrs.get("key.format", "string")
        field_name = None
        if fmt.startswith("json:") and len(fmt) > len("json:"):
            fmt, field_name = "json", fmt[len("json:"):]
        elif fmt not in ("bytes", "string"):
            raise ConfigError(f"downstream.{name}.key.format", fmt,
                              "must be bytes, string or json:<field>")
        tables.append(DownstreamTable(name, attrs["topic"], attrs["path"], attrs["key.column"],
                                      fmt, field_name))
    return tuple(tables)


@dataclass(frozen=True)
class CleanerConfig:
    """Broker-wide ``log.cleaner.*`` settings."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 134217728
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = math.inf


@dataclass(frozen=True)
class CompactorConfig:
    """Validated settings of one compactor deployment.

    ``topic_configs`` is empty until :func:`resolve_topics` has asked the broker.
    """

    bootstrap_servers: str
    topics: tuple[str, ...]
    lake_path: str
    checkpoint_path: str
    trigger_interval_ms: int = 5000
    max_offsets_per_trigger: int = 0
    starting_offsets: str = "earliest"
    fail_on_data_loss: bool = True
    table_merge_interval_ms: int = 0
    metrics_port: int = 0
    kafka: Mapping[str, str] = field(default_factory=dict)
    spark: Mapping[str, str] = field(default_factory=dict)
    storage: Storage = LOCAL  # lake.storage.*: delta-rs storage options for remote lakes
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    topic_configs: Mapping[str, TopicConfig] = field(default_factory=dict)
    downstream: tuple[DownstreamTable, ...] = ()
    # Typed user-given topic values: "" -> every topic, topic name -> that topic, and
    # "log" -> broker-wide defaults keyed by the topic key they default.
    topic_layers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    def topic(self, name: str) -> TopicConfig:
        try:
            return self.topic_configs[name]
        except KeyError:
            raise ConfigError(
                "topic", name, "is not one of the configured topics", f"topics={self.topics}"
            ) from None

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings: the ``kafka.*`` pass-through plus bootstrap.servers."""
        return {**self.kafka, "bootstrap.servers": self.bootstrap_servers}


def _parse_value(key: str, raw: str, parse: Callable[[str], Any], check: Check) -> Any:
    try:
        value = parse(raw)
    except ValueError as exc:
        raise ConfigError(key, raw, str(exc)) from None
    problem = check(value)
    if problem:
        raise ConfigError(key, raw, problem)
    return value


def _unknown(key: str, value: str) -> ConfigError:
    close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else "see conf/example.properties for the keys"
    return ConfigError(key, value, "is not a known configuration key", hint)


def _split_topic_key(key: str) -> tuple[str, str] | None:
    """``topic.orders.v1.segment.ms`` -> (``orders.v1``, ``segment.ms``); topic names hold dots."""
    rest = key[len("topic.") :]
    for name in sorted(TOPIC_KEYS, key=len, reverse=True):
        if rest.endswith("." + name) and len(rest) > len(name) + 1:
            return rest[: -len(name) - 1], name
    return None


def _topics(raw: str) -> tuple[str, ...]:
    names = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not names:
        raise ConfigError("topics", raw, "must name at least one topic (comma-separated)")
    for name in names:
        if not _TOPIC_NAME.match(name) or name in (".", ".."):
            raise ConfigError(
                "topics", name, "is not a legal Kafka topic name ([A-Za-z0-9._-], 1-249 chars)"
            )
    if len(set(names)) != len(names):
        raise ConfigError("topics", raw, "names a topic twice")
    return names


def build_config(raw: Mapping[str, str]) -> CompactorConfig:
    """Validate a flat key/value mapping (a parsed file plus CLI overrides)."""
    pipeline: dict[str, Any] = {}
    kafka: dict[str, str] = {}
    spark: dict[str, str] = {"spark.master": "local[*]"}
    storage: dict[str, str] = {}
    cleaner: dict[str, Any] = {}
    layers: dict[str, dict[str, Any]] = {"": {}, "log": {}}
    broker_raw: dict[str, str] = {}

    for key, value in raw.items():
        if key.startswith("kafka."):
            kafka[key[len("kafka.") :]] = value
        elif key.startswith("spark."):
            spark[key] = value
        elif key.startswith("lake.storage."):
            storage[key[len("lake.storage.") :]] = value
        elif key.startswith("topic."):
            split = _split_topic_key(key)
            if split is None:
                raise _unknown(key, value)
            topic, name = split
            spec = TOPIC_KEYS[name]
            layers.setdefault(topic, {})[name] = _parse_value(key, value, spec.parse, spec.check)
        elif key in TOPIC_KEYS:
            spec = TOPIC_KEYS[key]
            layers[""][key] = _parse_value(key, value, spec.parse, spec.check)
        elif key in CLEANER_KEYS:
            parse, check, _ = CLEANER_KEYS[key]
            cleaner[key[len("log.cleaner.") :].replace(".", "_")] = _parse_value(
                key, value, parse, check
            )
        elif key in PIPELINE_KEYS:
            parse, check, _ = PIPELINE_KEYS[key]
            pipeline[key] = _parse_value(key, value, parse, check)
        elif key in KNOWN_KEYS:
            broker_raw[key] = value
        elif _DOWNSTREAM_KEY.match(key):
            continue  # read below, once the topics are known
        else:
            raise _unknown(key, value)

    for name, spec in TOPIC_KEYS.items():
        if spec.broker_key in broker_raw:
            layers["log"][name] = _parse_value(
                spec.broker_key, broker_raw[spec.broker_key], spec.parse, spec.check
            )
            continue
        for alias, factor in _BROKER_ALIASES.get(spec.broker_key, ()):
            if alias in broker_raw:
                hours_or_minutes = _parse_value(alias, broker_raw[alias], _int, _at_least(-1))
                scaled = hours_or_minutes * factor if hours_or_minutes >= 0 else -1
                layers["log"][name] = _parse_value(alias, str(scaled), spec.parse, spec.check)
                break

    for key, (_, _, default) in PIPELINE_KEYS.items():
        if key not in pipeline:
            if default is None:
                raise ConfigError(key, None, "is required", f"add '{key}=...' to the config file")
            pipeline[key] = default
    topics = _topics(pipeline["topics"])
    for topic in layers:
        if topic not in ("", "log") and topic not in topics:
            raise ConfigError(
                f"topic.{topic}.*", topic, "configures a topic that is not in 'topics'",
                f"add it to topics= or remove the line; topics={','.join(topics)}",
            )
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
            "s3a:// with the hadoop-aws jars on the classpath); see 'Object storage' in the "
            "README")
    checkpoint = pipeline["checkpoint.path"] or str(Path(lake) / "checkpoints")
    if not pipeline["checkpoint.path"] and "checkpoints" in topics:
        raise ConfigError("checkpoint.path", "", "must be set when a topic is named 'checkpoints'",
                          "the default <lake.path>/checkpoints would share its directory")
    kafka.setdefault("isolation.level", "read_committed")

    config = CompactorConfig(
        bootstrap_servers=pipeline["bootstrap.servers"],
        topics=topics,
        lake_path=lake,
        checkpoint_path=checkpoint,
        trigger_interval_ms=pipeline["trigger.interval.ms"],
        max_offsets_per_trigger=pipeline["max.offsets.per.trigger"],
        starting_offsets=pipeline["starting.offsets"],
        fail_on_data_loss=pipeline["fail.on.data.loss"],
        table_merge_interval_ms=pipeline["table.merge.interval.ms"],
        metrics_port=pipeline["metrics.port"],
        kafka=MappingProxyType(kafka),
        spark=MappingProxyType(spark),
        storage=Storage(MappingProxyType(storage)),
        cleaner=CleanerConfig(**cleaner),
        topic_layers=MappingProxyType({k: MappingProxyType(v) for k, v in layers.items()}),
        downstream=_downstream(raw, topics),
    )
    # Check the file's own layers now, so a conflict fails before any broker is contacted.
    for topic in topics:
        resolve_topic(config, topic, {})
    return config


def load_config(path: str | Path, overrides: Mapping[str, str] | None = None) -> CompactorConfig:
    """Read and validate a properties file; ``overrides`` (from the CLI) win over the file."""
    raw = load_properties(path)
    raw.update(overrides or {})
    return build_config(raw)


def resolve_topic(
    config: CompactorConfig, topic: str, broker: Mapping[str, str]
) -> TopicConfig:
    """Merge the layers for one topic; ``broker`` holds the topic's non-default broker configs."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = config.topic_layers
    for name, spec in TOPIC_KEYS.items():
        if name in layers.get(topic, {}):
            values[name], sources[name] = layers[topic][name], "topic override"
        elif name in layers.get("", {}):
            values[name], sources[name] = layers[""][name], "file"
        elif name in broker:
            label = f"broker topic config {topic}"
            values[name] = _parse_value(f"{name} ({label})", broker[name], spec.parse, spec.check)
            sources[name] = "broker"
        elif name in layers.get("log", {}):
            values[name], sources[name] = layers["log"][name], "broker default (file)"
        else:
            values[name], sources[name] = spec.default, "kafka default"
    if values["max.compaction.lag.ms"] < values["min.compaction.lag.ms"]:
        raise ConfigError(
            f"max.compaction.lag.ms (topic {topic})",
            values["max.compaction.lag.ms"],
            f"must be >= min.compaction.lag.ms ({values['min.compaction.lag.ms']})",
            f"from {sources['max.compaction.lag.ms']} and {sources['min.compaction.lag.ms']}",
        )
    tc = TopicConfig(
        name=topic,
        cleanup_policy=values["cleanup.policy"],
        segment_bytes=values["segment.bytes"],
        segment_ms=values["segment.ms"],
        min_cleanable_dirty_ratio=values["min.cleanable.dirty.ratio"],
        min_compaction_lag_ms=values["min.compaction.lag.ms"],
        max_compaction_lag_ms=values["max.compaction.lag.ms"],
        delete_retention_ms=values["delete.retention.ms"],
        retention_ms=values["retention.ms"],
        retention_bytes=values["retention.bytes"],
        vacuum_grace=values["vacuum.grace.ms"],
        sources=MappingProxyType(sources),
    )
    if tc.erasure_deadline and tc.cleaning_lag_ms <= 0:
        raise ConfigError(
            f"vacuum.grace.ms (topic {topic})", tc.vacuum_grace_ms,
            f"leaves no time to clean within max.compaction.lag.ms ({tc.max_compaction_lag_ms}):"
            f" grace + a pass allowance of {tc.pass_allowance_ms} ms must stay below it",
            "lower vacuum.grace.ms or raise max.compaction.lag.ms",
        )
    return tc


def broker_overrides(entries: Mapping[str, tuple[str | None, bool]]) -> dict[str, str]:
    """Pick the DescribeConfigs entries (value, is_default) that are the topic's own settings.

    An entry counts when the broker says it is not a default, or when its value differs from
    Kafka's default (some brokers label explicit topic configs as defaults).
    """
    chosen: dict[str, str] = {}
    for name, (value, is_default) in entries.items():
        if name not in TOPIC_KEYS or value is None:
            continue
        spec = TOPIC_KEYS[name]
        try:
            same_as_default = spec.parse(value) == spec.default
        except ValueError:
            same_as_default = False
        if not is_default or not same_as_default:
            chosen[name] = value
    return chosen


def with_topic_configs(
    config: CompactorConfig, broker: Mapping[str, Mapping[str, str]]
) -> CompactorConfig:
    """Return the config with every topic resolved against its broker overrides."""
    resolved = {t: resolve_topic(config, t, broker.get(t, {})) for t in config.topics}
    for tc in resolved.values():
        if tc.erasure_deadline and config.table_merge_interval_ms > tc.cleaning_lag_ms:
            raise ConfigError(
                "table.merge.interval.ms", config.table_merge_interval_ms,
                f"would leave tombstones of {tc.name} unmerged past its erasure deadline: it "
                f"must be at most {tc.cleaning_lag_ms} ms (max.compaction.lag.ms - vacuum grace"
                " - pass allowance)", "lower it, or use 0 to merge after every micro-batch",
            )
    return replace(config, topic_configs=MappingProxyType(resolved))
