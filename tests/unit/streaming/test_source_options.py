"""Spark's Kafka source options: each works with Spark's meaning or is refused by name."""

from __future__ import annotations

import pytest

from streaming.exceptions import KafkaSourceError
from streaming.offset_planning import ByTimestamp, OffsetRange, split_ranges
from streaming.source_options import CLIENT_REFUSED, SourceOptions

BASE = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}


@pytest.mark.parametrize("name", ["endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"])
def test_ending_offsets_are_refused_in_streaming_as_spark_does(name) -> None:
    with pytest.raises(KafkaSourceError, match="not valid in streaming queries"):
        SourceOptions({**BASE, name: "latest"})


def test_a_timestamp_for_every_partition_wins_over_timestamps_by_partition_and_offsets() -> None:
    opts = SourceOptions({**BASE, "startingTimestamp": "1000", "startingOffsets": "earliest",
                          "startingOffsetsByTimestamp": '{"t":{"0":5}}'})
    assert opts.starting == ByTimestamp(1000, {}, "error")
    opts = SourceOptions({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":5,"1":7}}',
                          "startingOffsets": "earliest",
                          "startingOffsetsByTimestampStrategy": "LATEST"})
    assert opts.starting == ByTimestamp(None, {"t": {"0": 5, "1": 7}}, "latest")
    assert (opts.starting.at("t", 1), opts.starting.at("t", 2)) == (7, None)


def test_a_batch_read_ends_by_timestamp_and_an_unmatched_end_goes_to_latest() -> None:
    opts = SourceOptions({**BASE, "endingOffsetsByTimestamp": '{"t":{"0":2000}}',
                          "endingOffsets": "latest"}, streaming=False)
    assert opts.ending == ByTimestamp(None, {"t": {"0": 2000}}, "latest")
    assert SourceOptions({**BASE, "endingTimestamp": "9"}, streaming=False).ending == (
        ByTimestamp(9, {}, "latest"))


@pytest.mark.parametrize(("extra", "message"), [
    ({"startingTimestamp": "-5"}, "option startingTimestamp='-5': must be a timestamp in "
                                  "milliseconds"),
    ({"startingTimestamp": "yesterday"}, "option startingTimestamp='yesterday'"),
    ({"startingOffsetsByTimestamp": '{"t":{"0":-1}}'}, "option startingOffsetsByTimestamp="),
    ({"startingOffsetsByTimestamp": '{"t":[1000]}'}, "must be JSON like"),
    ({"startingOffsetsByTimestampStrategy": "earliest"},
     "startingOffsetsByTimestampStrategy='earliest': must be error"),
])
def test_bad_timestamp_options_are_named_with_the_rule(extra, message) -> None:
    with pytest.raises(KafkaSourceError) as info:
        SourceOptions({**BASE, **extra})
    assert message in str(info.value)


@pytest.mark.parametrize("key", sorted(CLIENT_REFUSED))
def test_client_settings_that_break_the_guarantees_are_refused(key) -> None:
    with pytest.raises(KafkaSourceError) as info:
        SourceOptions({**BASE, f"kafka.{key}": "x"})
    assert f"Kafka option kafka.{key}='x' is not supported" in str(info.value)


def test_implemented_options_are_accepted() -> None:
    opts = SourceOptions({**BASE, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "5",
                          "failOnDataLoss": "false", "includeHeaders": "true",
                          "kafkaConsumer.pollTimeoutMs": "1000", "kafka.client.id": "x",
                          "minOffsetsPerTrigger": "2", "maxTriggerDelay": "30s",
                          "minPartitions": "8", "maxRecordsPerPartition": "100",
                          "groupIdPrefix": "mine", "fetchOffset.numRetries": "5",
                          "fetchOffset.retryIntervalMs": "10"})
    assert (opts.max_offsets, opts.fail_on_data_loss, opts.include_headers) == (5, False, True)
    assert opts.client_config["client.id"] == "x" and opts.client_config["group.id"] == "mine"
    assert (opts.min_offsets, opts.max_trigger_delay_ms) == (2, 30_000)
    assert (opts.min_partitions, opts.max_records_per_partition) == (8, 100)
    assert (opts.fetch_retries, opts.fetch_retry_interval_ms) == (5, 10)


@pytest.mark.parametrize(("extra", "message"), [
    ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "is higher than"),
    ({"minPartitions": "0"}, "must be a positive whole number"),
    ({"maxTriggerDelay": "soon"}, "must be a duration"),
    ({"assign": '{"t":[0]}'}, "exactly one of the options assign, subscribe"),
    ({"subscribe": " , "}, "names no topic"),
])
def test_bad_values_name_the_option(extra, message) -> None:
    with pytest.raises(KafkaSourceError, match=message):
        SourceOptions({**BASE, **extra})


def test_assign_and_batch_bounds() -> None:
    opts = SourceOptions({"kafka.bootstrap.servers": "b:1", "assign": '{"a":[1,0],"b":[2]}'})
    assert opts.assigned == [("a", 0), ("a", 1), ("b", 2)] and opts.topics is None
    batch = SourceOptions(BASE, streaming=False)
    assert (batch.starting, batch.ending) == ("earliest", "latest")  # Spark's batch defaults
    with pytest.raises(KafkaSourceError, match="cannot start at latest"):
        SourceOptions({**BASE, "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(KafkaSourceError, match="cannot end at earliest"):
        SourceOptions({**BASE, "endingOffsets": "earliest"}, streaming=False)
    SourceOptions({**BASE, "endingOffsets": "latest"}, streaming=None)  # load(): not yet known


def test_split_ranges_as_spark_does() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 10, 20), OffsetRange("t", 2, 5, 5)]
    split = split_ranges(ranges, min_partitions=10)
    assert [(r.partition, r.start, r.end) for r in split if r.partition == 1] == [(1, 10, 20)]
    zero = [r for r in split if r.partition == 0]
    assert len(zero) == 9 and zero[0].start == 0 and zero[-1].end == 90
    assert all(a.end == b.start for a, b in zip(zero, zero[1:], strict=False))
    assert [r.size for r in split_ranges(ranges, max_records=40)] == [30, 30, 30, 10]
    assert split_ranges(ranges) == ranges[:2]  # empty ranges are dropped, nothing else
