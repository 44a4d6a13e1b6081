"""The mirror's position, committed to a consumer group, as lag tools read it."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from compactor.demo.workload import Record, produce
from tests.integration.helpers import lake_offsets, run_once


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)]).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions
            if tp.offset >= 0}


@pytest.mark.usefixtures("spark")
def test_the_mirrored_offsets_are_committed_to_the_group(broker, topic_factory,
                                                          lake_config) -> None:
    topic = topic_factory(2)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2)
                                              for i in range(15)])
    config = lake_config(topic)
    assert config.group_id.startswith("compactor-lake-")  # named after the lake
    run_once(config)
    offsets = lake_offsets(f"{config.lake_path}/{topic}/log")
    mirrored = {(topic, p): max(o for q, o in offsets if q == p) + 1 for p in (0, 1)}
    assert _committed(broker.bootstrap_servers, config.group_id) == mirrored == {
        (topic, 0): 8, (topic, 1): 7}

    off = lake_config(topic, commit_offsets="false", group_id="never-used-group")
    produce(broker.bootstrap_servers, topic, [Record(b"more", b"v", 0)])
    run_once(off)
    assert _committed(broker.bootstrap_servers, "never-used-group") == {}
