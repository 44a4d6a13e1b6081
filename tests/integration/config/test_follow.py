"""A running mirror follows the broker's topic configs, as Kafka's cleaner does."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import alter_topic, log_table, running


def _rows(config: Any, topic: str) -> int | None:
    log = topic_paths(config.lake_path, topic).log
    return log_table(config, topic).num_rows if os.path.exists(f"{log}/_delta_log") else None


@pytest.mark.usefixtures("spark")
def test_a_running_mirror_applies_a_new_policy_and_retention_without_a_restart(
        broker, topic_factory, lake_config, caplog) -> None:
    topic = topic_factory(1, {"cleanup.policy": "delete", "segment.bytes": "100",
                              "min.cleanable.dirty.ratio": "0.01"})
    produce(broker.bootstrap_servers, topic, [Record(b"same", b"v" * 30, 0) for _ in range(6)])
    config = lake_config(topic, trigger_interval_ms="300", log_cleaner_backoff_ms="300",
                         config_refresh_interval_ms="1000")
    caplog.set_level(logging.INFO, logger="compactor.config.follow")
    with running(Service(config)) as failures:
        wait_until(lambda: _rows(config, topic) == 6, 60, "the six records")
        # delete -> compact, segments [0, 1] [2, 3] [4, 5]: the offset map covers the closed
        # ones, so 3 is kept as their latest, 0-2 go, the active segment stays.
        alter_topic(broker.bootstrap_servers, topic, {"cleanup.policy": "compact"})
        wait_until(lambda: _rows(config, topic) == 3, 60,
                   "compaction under the new policy")
        # A retention lowered for compliance: every segment goes, the active one too.
        alter_topic(broker.bootstrap_servers, topic, {"cleanup.policy": "compact,delete"})
        alter_topic(broker.bootstrap_servers, topic, {"retention.ms": "1000"})
        wait_until(lambda: _rows(config, topic) == 0, 60,
                   "retention under the new retention.ms")
        assert not failures, failures
    said = [r.getMessage() for r in caplog.records if r.name == "compactor.config.follow"]
    assert any("cleanup.policy: delete -> compact (broker)" in m for m in said), said
    assert any("retention.ms: 604800000 -> 1000 (broker)" in m for m in said), said


def test_a_refused_new_value_keeps_the_previous_config_and_says_why(
        broker, topic_factory, lake_config, caplog) -> None:
    from compactor.config.follow import refresh_topic_configs

    topic = topic_factory(1, {"cleanup.policy": "compact"})
    config = lake_config(topic, min_compaction_lag_ms="5000")
    before = config.topic(topic)
    alter_topic(broker.bootstrap_servers, topic, {"max.compaction.lag.ms": "1000"})  # < the min lag
    with caplog.at_level(logging.ERROR, logger="compactor.config.follow"):
        assert refresh_topic_configs(config) == {}
    assert config.topic(topic) is before
    assert any("max.compaction.lag.ms" in r.getMessage() and "the previous one stays"
               in r.getMessage() for r in caplog.records), caplog.text
    alter_topic(broker.bootstrap_servers, topic, {"max.compaction.lag.ms": "60000"})
    applied = refresh_topic_configs(config)
    assert f"max.compaction.lag.ms: {before.max_compaction_lag_ms} -> 60000 (broker)" in (
        applied[topic])
    assert config.topic(topic).max_compaction_lag_ms == 60000
