"""Spark's Kafka source options: each works with Spark's meaning or is refused by name."""

from __future__ import annotations

import pytest

from streaming.exceptions import KafkaSourceError
from streaming.kafka_source import CLIENT_REFUSED, NOT_YET, SourceOptions

BASE = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}
SPARK_NAMES = {  # Spark's own spelling, as users write it
    "assign": '{"t":[0]}', "startingTimestamp": "1000",
    "startingOffsetsByTimestamp": '{"t":{"0":1000}}',
    "startingOffsetsByTimestampStrategy": "latest", "minOffsetsPerTrigger": "10",
    "maxTriggerDelay": "5m", "minPartitions": "4", "maxRecordsPerPartition": "100",
    "groupIdPrefix": "mirror", "fetchOffset.numRetries": "3",
    "fetchOffset.retryIntervalMs": "10",
}


def test_every_not_yet_option_is_listed_in_spark_spelling() -> None:
    assert {k.lower() for k in SPARK_NAMES} == set(NOT_YET)


@pytest.mark.parametrize(("name", "value"), sorted(SPARK_NAMES.items()))
def test_an_option_not_implemented_is_refused_by_name_never_ignored(name, value) -> None:
    with pytest.raises(KafkaSourceError) as info:
        SourceOptions({**BASE, name: value})
    assert f"option {name}={value!r} is not supported by the pykafka source" in str(info.value)


@pytest.mark.parametrize("name", ["endingOffsets", "endingOffsetsByTimestamp"])
def test_ending_offsets_are_refused_in_streaming_as_spark_does(name) -> None:
    with pytest.raises(KafkaSourceError, match="not valid in streaming queries"):
        SourceOptions({**BASE, name: "latest"})


@pytest.mark.parametrize("key", sorted(CLIENT_REFUSED))
def test_client_settings_that_break_the_guarantees_are_refused(key) -> None:
    with pytest.raises(KafkaSourceError) as info:
        SourceOptions({**BASE, f"kafka.{key}": "x"})
    assert f"Kafka option kafka.{key}='x' is not supported" in str(info.value)


def test_implemented_options_are_accepted() -> None:
    opts = SourceOptions({**BASE, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "5",
                          "failOnDataLoss": "false", "includeHeaders": "true",
                          "kafkaConsumer.pollTimeoutMs": "1000", "kafka.client.id": "x"})
    assert (opts.max_offsets, opts.fail_on_data_loss, opts.include_headers) == (5, False, True)
    assert opts.client_config["client.id"] == "x"
