"""A compacted topic whose max.compaction.lag.ms Kafka accepts but that is too short for the
vacuum grace plus a pass: mirrored and cleaned, with a warning everywhere an operator looks."""

from __future__ import annotations

import json
import logging

import pytest

from compactor.demo.workload import Record, produce
from tests.integration.helpers import compactor, log_table, run_once, write_config


@pytest.mark.usefixtures("spark")
def test_a_3_second_max_lag_mirrors_with_a_warning(broker, topic_factory, lake_config,
                                                   tmp_path, caplog) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "3000"})
    records = [Record(b"k%d" % (i % 5), b"v%d" % i, 0) for i in range(40)]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic)
    with caplog.at_level(logging.WARNING, logger="streaming.service"):
        run_once(config)
    assert any("best effort" in r.getMessage() and topic in r.getMessage()
               for r in caplog.records), caplog.text
    rows = log_table(config, topic).to_pylist()
    # Cleaned as soon as possible: the active segment rolled, only each key's latest is left.
    assert sorted(r["offset"] for r in rows) == [35, 36, 37, 38, 39]

    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path})
    described = compactor("describe-config", "--config", str(conf), "--json")
    assert described.returncode == 0, described.stderr[-2000:]
    assert "best effort" in json.loads(described.stdout)["warnings"][topic]
    table = compactor("describe-config", "--config", str(conf))
    assert "WARNING: erasure deadline of" in table.stdout
    status = compactor("status", "--config", str(conf), "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    [t] = json.loads(status.stdout)["topics"]
    assert "best effort" in t["deadline_warning"]
    assert "WARNING: erasure deadline" in compactor("status", "--config", str(conf)).stdout


def test_a_trigger_longer_than_the_cleaning_lag_is_warned_about(broker, topic_factory,
                                                                tmp_path) -> None:
    # M = 60 s leaves 33 s before cleaning is due; a tombstone may wait 40 s for its batch.
    topic = topic_factory(1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"})
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "trigger.interval.ms": "40000"})
    described = compactor("describe-config", "--config", str(conf), "--json")
    assert described.returncode == 0, described.stderr[-2000:]
    warning = json.loads(described.stdout)["warnings"][topic]
    assert "best effort: trigger.interval.ms=40000" in warning
    assert "lower trigger.interval.ms to 33000 or less" in warning
    conf = write_config(tmp_path / "ok.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "trigger.interval.ms": "30000"})
    described = compactor("describe-config", "--config", str(conf), "--json")
    assert topic not in json.loads(described.stdout).get("warnings", {})
