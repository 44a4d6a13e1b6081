"""Offsets that vanish from Kafka: a recreated topic is data loss, never silently mixed."""

from __future__ import annotations

import pytest

from compactor.exceptions import DataLossError
from compactor.workload import Record, produce
from tests.conftest import wait_until
from tests.integration.helpers import log_table, run_once


@pytest.mark.usefixtures("spark")
def test_a_recreated_topic_stops_the_mirror_with_a_data_loss_error(
        broker, topic_factory, lake_config) -> None:
    from confluent_kafka.admin import AdminClient

    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", 0) for i in range(10)])
    config = lake_config(topic, log_cleaner_enable="false")
    run_once(config)
    assert log_table(config, topic).num_rows == 10

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(timeout=30)
    wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, 30, "topic deletion")
    topic_factory(1, name=topic)
    produce(broker.bootstrap_servers, topic, [Record(b"new", b"v", 0) for _ in range(3)])

    with pytest.raises(DataLossError, match=f"{topic}-0.*behind"):
        run_once(config)
    assert log_table(config, topic).num_rows == 10  # nothing of the new incarnation mixed in
