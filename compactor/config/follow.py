"""Following the broker's topic configs while the mirror runs.

Kafka's cleaner reads each log's config on every round, so a retention lowered for
compliance, a policy changed from delete to compact or a new ``max.compaction.lag.ms`` takes
effect without a restart. A running mirror does the same every
``config.refresh.interval.ms``: it asks the broker again (one DescribeConfigs request for
every topic), resolves each topic through the same layers and rules as at start, and puts a
changed topic's config in place whole (:class:`~compactor.config.model.TopicConfigs`), so the
next micro-batch and the next cleaning pass use it. A refused value keeps the previous config
and is logged, as is every change and every warning a start would give.
"""

from __future__ import annotations

import logging

from compactor.config.keys import TOPIC_KEYS
from compactor.config.model import CompactorConfig, TopicConfig
from compactor.config.resolve import broker_overrides, check_topic, resolve_topic
from compactor.exceptions import CompactorError
from compactor.kafka.admin import describe_topic_configs

log = logging.getLogger(__name__)


def changes(old: TopicConfig, new: TopicConfig) -> list[str]:
    """``key: old -> new (source)`` for each topic key whose effective value changed."""
    return [f"{key}: {old.value(key)} -> {new.value(key)} ({new.sources.get(key, '?')})"
            for key in TOPIC_KEYS if old.value(key) != new.value(key)]


def refresh_topic_configs(config: CompactorConfig) -> dict[str, list[str]]:
    """Ask the broker for every topic's configs again and apply the changed ones; returns the
    changes applied, by topic. A broker that cannot answer leaves every config as it was."""
    try:
        entries = describe_topic_configs(config.kafka_client_config(), config.topics)
    except CompactorError as exc:
        log.warning("topic configs not refreshed, the previous ones stay: %s", exc)
        return {}
    applied: dict[str, list[str]] = {}
    for topic in config.topics:
        old = config.topic(topic)
        try:
            new = resolve_topic(config, topic, broker_overrides(entries.get(topic, {})))
            check_topic(config, new)
        except CompactorError as exc:
            log.error("%s: the broker's new topic config is refused, the previous one stays: "
                      "%s", topic, exc)
            continue
        changed = changes(old, new)
        if not changed:
            continue
        config.topic_configs.replace(new)
        applied[topic] = changed
        log.info("%s: topic config changed on the broker, applied from the next micro-batch "
                 "and pass: %s", topic, "; ".join(changed))
        if new.deadline_warning and new.deadline_warning != old.deadline_warning:
            log.warning("%s", new.deadline_warning)
    return applied
