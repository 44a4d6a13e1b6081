"""``compactor describe-config``: every value's source, secrets never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.integration.helpers import write_config


def test_each_value_names_its_source_and_secrets_are_redacted(broker, topic_factory,
                                                              tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "2000000"})
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "delete.retention.ms": "1234",
        f"topic.{topic}.min.compaction.lag.ms": "42", "log.retention.ms": "777",
        "log.erasure.ledger.retention.ms": "86400000",
        "kafka.sasl.password": "hunter2-secret", "kafka.client.id": "mirror-7",
        "kafka.client.rack": "${env:MIRROR_RACK}",
        "lake.storage.AWS_SECRET_ACCESS_KEY": "hunter2-s3", "lake.storage.AWS_REGION": "eu-west-1"})
    env = {**os.environ, "MIRROR_RACK": "rack-from-the-environment"}
    result = subprocess.run([sys.executable, "-m", "compactor.cli", "describe-config",
                             "--config", str(conf), "--json"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "hunter2" not in result.stdout and "hunter2" not in result.stderr
    described = json.loads(result.stdout)
    entries = described["topics"][topic]
    assert entries["segment.bytes"] == {"value": 2000000, "source": "broker"}
    assert entries["cleanup.policy"] == {"value": "compact", "source": "broker"}
    assert entries["delete.retention.ms"] == {"value": 1234, "source": "file"}
    assert entries["min.compaction.lag.ms"] == {"value": 42, "source": "topic override"}
    assert entries["retention.ms"] == {"value": 777, "source": "broker default (file)"}
    assert entries["max.compaction.lag.ms"]["source"] == "kafka default"
    assert entries["vacuum.grace.ms"]["source"] == "compactor default"  # not Kafka's key
    assert entries["erasure.ledger.retention.ms"] == {"value": 86400000,
                                                      "source": "broker default (file)"}
    assert described["pipeline"]["kafka.sasl.password"] == "[redacted]"
    assert described["pipeline"]["kafka.client.id"] == "mirror-7"
    # A value from the environment is shown as the reference, never as what it resolved to.
    assert described["pipeline"]["kafka.client.rack"] == "${env:MIRROR_RACK}"
    assert "rack-from-the-environment" not in result.stdout + result.stderr
    assert described["pipeline"]["lake.storage.AWS_SECRET_ACCESS_KEY"] == "[redacted]"
    assert described["pipeline"]["lake.storage.AWS_REGION"] == "eu-west-1"

    table = subprocess.run([sys.executable, "-m", "compactor.cli", "describe-config",
                            "--config", str(conf)], capture_output=True, text=True, timeout=120,
                           env=env)
    assert table.returncode == 0 and "hunter2" not in table.stdout
    assert "(topic override)" in table.stdout and f"topic {topic}" in table.stdout
    # As a properties file writes them, not as Python prints them.
    assert "fail.on.data.loss = true" in table.stdout and "True" not in table.stdout


def test_a_deadline_topics_table_cadence_leaves_room_for_the_trigger(broker, topic_factory,
                                                                     tmp_path) -> None:
    # M = 20 s: cleaning due 11 s after a tombstone, which may wait a 5 s trigger to land.
    topic = topic_factory(1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "20000"})
    settings = {"bootstrap.servers": broker.bootstrap_servers, "topics": topic,
                "lake.path": str(tmp_path / "lake"), "trigger.interval.ms": "5000"}

    def describe(name: str, **extra: str) -> subprocess.CompletedProcess[str]:
        conf = write_config(tmp_path / name, **settings, **extra)
        return subprocess.run([sys.executable, "-m", "compactor.cli", "describe-config",
                               "--config", str(conf), "--json"], capture_output=True,
                              text=True, timeout=120)

    shown = describe("default.properties")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert json.loads(shown.stdout)["table_merge_ms"][topic] == 6000
    refused = describe("set.properties", **{"table.merge.interval.ms": "8000"})
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "table.merge.interval.ms=8000" in refused.stderr
    assert "must be at most 6000 ms" in refused.stderr
