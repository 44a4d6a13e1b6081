"""Transactions on Apache Kafka: the mirror reads committed records only (read_committed)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.helpers import log_table, run_once


def _transactional(servers: str) -> Producer:
    producer = Producer({"bootstrap.servers": servers, "transactional.id": f"tx-{uuid.uuid4()}",
                         "log_level": 0})
    producer.init_transactions(30)
    return producer


def _send(producer: Producer, topic: str, keys: list[bytes]) -> None:
    producer.begin_transaction()
    for key in keys:
        producer.produce(topic, key=key, value=b"v-" + key, partition=0)
    producer.flush(30)


@pytest.mark.usefixtures("spark")
def test_committed_records_only_and_nothing_past_an_open_transaction(kafka, lake_config) -> None:
    topic = f"tx-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[
        topic].result(30)
    committed, aborted, open_ = (_transactional(kafka.bootstrap_servers) for _ in range(3))
    _send(committed, topic, [b"c1", b"c2"])
    committed.commit_transaction(30)
    _send(aborted, topic, [b"a1"])
    aborted.abort_transaction(30)
    _send(open_, topic, [b"o1"])  # still open: the last stable offset stops before it
    _send(committed, topic, [b"c3"])
    committed.commit_transaction(30)

    config = lake_config(topic, bootstrap_servers=kafka.bootstrap_servers)
    run_once(config)
    rows = log_table(config, topic).to_pylist()
    assert [r["key"] for r in rows] == [b"c1", b"c2"]  # c3 lies past the open transaction
    offsets = [r["offset"] for r in rows]
    assert offsets == [0, 1]

    open_.commit_transaction(30)
    run_once(config)
    rows = log_table(config, topic).to_pylist()
    assert [r["key"] for r in rows] == [b"c1", b"c2", b"o1", b"c3"]
    offsets = [r["offset"] for r in rows]
    # The aborted record and the transaction markers hold offsets the log never shows.
    assert offsets == sorted(set(offsets)) and offsets[-1] - offsets[0] + 1 > len(offsets)
