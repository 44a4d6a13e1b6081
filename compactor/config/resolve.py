"""Resolution of each topic's effective config: file layers, then the broker, then Kafka.

The broker is asked once, at start (DescribeConfigs through :mod:`compactor.kafka.admin`);
what it answers is validated with the same rules as the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from compactor.config.keys import TOPIC_KEYS, parse_value
from compactor.config.model import CompactorConfig, TopicConfig, TopicConfigs
from compactor.exceptions import ConfigError
from compactor.kafka.admin import describe_topic_configs


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
            values[name] = parse_value(f"{name} ({label})", broker[name], spec.parse, spec.check)
            sources[name] = "broker"
        elif name in layers.get("log", {}):
            values[name], sources[name] = layers["log"][name], "broker default (file)"
        else:
            values[name] = spec.default
            sources[name] = "kafka default" if spec.kafka else "compactor default"
    if values["max.compaction.lag.ms"] < values["min.compaction.lag.ms"]:
        raise ConfigError(
            f"max.compaction.lag.ms (topic {topic})",
            values["max.compaction.lag.ms"],
            f"must be >= min.compaction.lag.ms ({values['min.compaction.lag.ms']})",
            f"from {sources['max.compaction.lag.ms']} and {sources['min.compaction.lag.ms']}",
        )
    tc = TopicConfig(name=topic, sources=MappingProxyType(sources),
                     trigger_interval_ms=config.trigger_interval_ms,
                     **{spec.field: values[name] for name, spec in TOPIC_KEYS.items()})
    isolation = config.kafka.get("isolation.level", "read_committed")
    if tc.compact and isolation == "read_uncommitted":
        # Kafka's cleaner drops aborted transactions' records; mirrored as data, they would
        # win compaction over the committed value they followed.
        raise ConfigError(
            "kafka.isolation.level", isolation,
            f"topic {topic} is compacted (cleanup.policy={tc.value('cleanup.policy')}), and "
            "read_uncommitted would mirror aborted transactions' records as data, where they "
            "win compaction", "remove the setting: the mirror reads read_committed")
    if tc.erasure_deadline and tc.vacuum_grace >= tc.max_compaction_lag_ms:
        # A grace the user set (not Kafka's key) that alone outlasts the deadline contradicts
        # it; a max lag that is merely short is Kafka-valid and runs best effort.
        raise ConfigError(
            f"vacuum.grace.ms (topic {topic})", tc.vacuum_grace_ms,
            f"keeps removed files at least as long as max.compaction.lag.ms "
            f"({tc.max_compaction_lag_ms}), so no erasure could finish by its deadline",
            "lower vacuum.grace.ms (by default it is a quarter of max.compaction.lag.ms)",
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


def check_topic(config: CompactorConfig, tc: TopicConfig) -> None:
    """The rules that tie a topic's config to the pipeline's (at start and on a refresh)."""
    if (tc.erasure_deadline and not tc.deadline_best_effort
            and config.table_merge_interval_ms > tc.table_lag_ms):  # set, not -1
        raise ConfigError(
            "table.merge.interval.ms", config.table_merge_interval_ms,
            f"would leave tombstones of {tc.name} unmerged past its erasure deadline: it "
            f"must be at most {tc.table_lag_ms} ms (max.compaction.lag.ms - vacuum grace"
            " - pass allowance - trigger.interval.ms)",
            "lower it, or use 0 to merge after every micro-batch",
        )


def with_topic_configs(
    config: CompactorConfig, broker: Mapping[str, Mapping[str, str]]
) -> CompactorConfig:
    """Return the config with every topic resolved against its broker overrides."""
    resolved = {t: resolve_topic(config, t, broker.get(t, {})) for t in config.topics}
    for tc in resolved.values():
        check_topic(config, tc)
    return replace(config, topic_configs=TopicConfigs(resolved))


def resolve_config(config: CompactorConfig) -> CompactorConfig:
    """Fill in every topic's effective config from the broker (step 3 of the layering)."""
    entries = describe_topic_configs(config.kafka_client_config(), config.topics)
    return with_topic_configs(
        config, {topic: broker_overrides(found) for topic, found in entries.items()})
