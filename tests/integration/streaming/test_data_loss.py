"""Offsets that vanish from Kafka: a recreated topic is data loss, never silently mixed."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.exceptions import DataLossError
from compactor.ingest.incarnation import TOPIC_ID_PROPERTY
from compactor.lake.layout import topic_paths
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import log_table, recreate_topic, run_once, running


def _keys(config, topic: str) -> set[bytes]:
    return set(log_table(config, topic).column("key").to_pylist())


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("fail_on_data_loss,new_records", [("true", 3), ("false", 25)])
def test_a_recreated_topic_stops_the_mirror_and_nothing_of_it_is_written(
        broker, topic_factory, lake_config, fail_on_data_loss, new_records) -> None:
    """Whether the new incarnation is shorter (offsets fall behind) or longer than what was
    mirrored (offsets alone cannot tell), and whatever fail.on.data.loss says."""
    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", 0) for i in range(10)])
    config = lake_config(topic, log_cleaner_enable="false",
                         fail_on_data_loss=fail_on_data_loss)
    run_once(config)
    log_path = topic_paths(config.lake_path, topic).log
    first_id = DeltaTable(log_path).metadata().configuration[TOPIC_ID_PROPERTY]

    recreate_topic(broker, topic_factory, topic, new_records)
    with pytest.raises(DataLossError, match="deleted and recreated") as failure:
        run_once(config)
    assert first_id in str(failure.value) and "move" in str(failure.value)
    assert _keys(config, topic) == {b"k%d" % i for i in range(10)}
    assert DeltaTable(log_path).metadata().configuration[TOPIC_ID_PROPERTY] == first_id


@pytest.mark.usefixtures("spark")
def test_a_topic_recreated_while_the_mirror_runs_stops_it_before_any_commit(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", 0) for i in range(10)])
    config = lake_config(topic, log_cleaner_enable="false", fail_on_data_loss="false",
                         trigger_interval_ms="200")
    service = Service(config)
    with running(service) as failures:
        log_path = topic_paths(config.lake_path, topic).log
        wait_until(lambda: DeltaTable.is_deltatable(log_path)
                   and log_table(config, topic).num_rows == 10, 120, "first mirror")
        recreate_topic(broker, topic_factory, topic, 25)
        wait_until(lambda: failures, 120, "the run to stop")
    assert isinstance(failures[0], DataLossError), failures[0]
    assert "deleted and recreated" in str(failures[0])
    assert _keys(config, topic) == {b"k%d" % i for i in range(10)}
