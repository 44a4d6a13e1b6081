"""What only Apache Kafka shows: its own tools, and partitions added under a running mirror."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from compactor.demo.workload import Record, produce
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import created, lake_offsets, run_once, running
from tests.kafka.broker import kafka_libs


@pytest.mark.usefixtures("spark")
def test_kafkas_consumer_groups_tool_sees_the_mirrors_position(
        kafka, kafka_topic, lake_config) -> None:
    topic = kafka_topic(2, {"cleanup.policy": "compact"})
    produce(kafka.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2) for i in range(9)])
    config = lake_config(topic, bootstrap_servers=kafka.bootstrap_servers)
    run_once(config)
    described = subprocess.run(
        ["java", "-cp", f"{kafka_libs()}/*",
         "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
         "--bootstrap-server", kafka.bootstrap_servers, "--describe", "--group",
         config.group_id], capture_output=True, text=True, timeout=120)
    assert described.returncode == 0, described.stderr[-2000:]
    rows = {tuple(line.split()[1:6]) for line in described.stdout.splitlines()
            if line.startswith(config.group_id)}
    # TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG: caught up, lag 0
    assert rows == {(topic, "0", "5", "5", "0"), (topic, "1", "4", "4", "0")}


@pytest.mark.usefixtures("spark")
def test_partitions_added_while_the_mirror_runs_are_mirrored(
        kafka, kafka_topic, lake_config) -> None:
    topic = kafka_topic(2, {"cleanup.policy": "compact"})
    produce(kafka.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2) for i in range(4)])
    config = lake_config(topic, bootstrap_servers=kafka.bootstrap_servers,
                         trigger_interval_ms="300")
    log = f"{config.lake_path}/{topic}/log"
    with running(Service(config)) as failures:
        wait_until(lambda: len(lake_offsets(log)) == 4 if created(log) else False, 120,
                   "the first records")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        produce(kafka.bootstrap_servers, topic,
                [Record(b"n%d" % i, b"v", 2 + i % 2) for i in range(6)])
        wait_until(lambda: failures or sorted(lake_offsets(log)) == [
            (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2)],
            120, "the new partitions' records")
        assert failures == []
    run_once(config)  # a second run adds nothing
    assert len(lake_offsets(log)) == 10
