"""The warning that cleaning passes outlast what an erasure deadline leaves for one."""

from __future__ import annotations

import logging

import pytest

from compactor.cleaner.allowance import REPEAT_S, AllowanceWatch
from compactor.config import build_config, with_topic_configs


def test_a_pass_longer_than_a_deadline_allows_is_named_once_per_topic_for_a_while(
        caplog: pytest.LogCaptureFixture) -> None:
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": "erased,plain,tight",
        "lake.path": "/tmp/unused", "cleanup.policy": "compact",
        "topic.erased.max.compaction.lag.ms": "60000",  # 12 s left for a pass
        "topic.tight.max.compaction.lag.ms": "1000"}), {})  # best effort already: said at start
    assert config.topic("erased").pass_allowance_ms == 12_000
    now = [0.0]
    watch = AllowanceWatch(config, clock=lambda: now[0])
    topics = ["erased", "plain", "tight"]

    assert watch.check(topics, 11.9) == []
    with caplog.at_level(logging.WARNING, logger="compactor.cleaner.allowance"):
        assert watch.check(topics, 12.5) == ["erased"]
    assert ("erased: a cleaning pass took 12.5 s, longer than the 12.0 s its erasure deadline "
            "leaves for one (max.compaction.lag.ms=60000") in caplog.text
    now[0] = REPEAT_S - 1
    assert watch.check(topics, 30.0) == []
    now[0] = REPEAT_S
    assert watch.check(topics, 30.0) == ["erased"]
