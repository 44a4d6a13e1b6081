"""The one configuration object, validated once at load.

Keys carry Kafka's names and defaults. A topic config value is taken from the first of:

1. ``topic.<name>.<key>`` in the file (one topic),
2. ``<key>`` in the file (every mirrored topic),
3. the topic's own config on the broker (DescribeConfigs),
4. the broker-wide ``log.*`` key in the file,
5. Kafka's default.

Everything below this package receives a :class:`CompactorConfig` and never a raw dictionary.
The modules: :mod:`~compactor.config.keys` (names, rules, defaults),
:mod:`~compactor.config.properties` (the file format), :mod:`~compactor.config.load`
(validation), :mod:`~compactor.config.resolve` (layers and the broker),
:mod:`~compactor.config.model` (the frozen objects).
"""

from compactor.config.keys import LONG_MAX, PIPELINE_KEYS, TOPIC_KEYS
from compactor.config.load import build_config, load_config
from compactor.config.model import CleanerConfig, CompactorConfig, DownstreamTable, TopicConfig
from compactor.config.resolve import (
    broker_overrides,
    resolve_config,
    resolve_topic,
    with_topic_configs,
)

__all__ = [
    "LONG_MAX", "PIPELINE_KEYS", "TOPIC_KEYS", "CleanerConfig", "CompactorConfig",
    "DownstreamTable",
    "TopicConfig", "broker_overrides", "build_config", "load_config", "resolve_config",
    "resolve_topic", "with_topic_configs",
]
