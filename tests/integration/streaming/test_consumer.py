"""Reading many partitions' ranges with one consumer, against the test broker."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from compactor.demo.workload import Record, produce
from compactor.exceptions import DataLossError
from streaming.consumer import consume_range, consume_ranges


def _offsets(batches: list[Any]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_each_range_gets_exactly_its_offsets(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(4)
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v%d" % i, i % 3) for i in range(60)])  # partition 3 empty
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    ranges = [(topic, 0, 0, 20), (topic, 1, 5, 12), (topic, 2, 19, 20), (topic, 3, 0, 0)]
    got = consume_ranges(conf, ranges, poll_timeout_ms=30_000)
    assert [_offsets(b) for b in got] == [list(range(20)), list(range(5, 12)), [19], []]
    assert {v for b in got[1] for v in b.column("value").to_pylist()} == {
        b"v%d" % (3 * o + 1) for o in range(5, 12)}
    assert _offsets(list(consume_range(conf, topic, 1, 5, 12, 30_000))) == list(range(5, 12))


def test_ranges_of_several_topics_read_together_match_each_read_alone(
        broker: Any, topic_factory: Any) -> None:
    """One consume() carries records of many partitions, turned into Arrow at once and cut by
    range: every column of every range is what reading that range alone gives."""
    topics = [topic_factory(3), topic_factory(2)]
    now = int(time.time() * 1000)
    for t, topic in enumerate(topics):
        produce(broker.bootstrap_servers, topic, [
            Record(None if i % 7 == 0 else b"k%d" % i, None if i % 5 == 0 else b"v%d" % i,
                   i % (3 - t), now + i,
                   (("h", b"x%d" % i), ("n", None)) if i % 4 == 0 else ())
            for i in range(90)])
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    ranges = [(topics[0], 0, 3, 30), (topics[0], 1, 0, 1), (topics[0], 2, 10, 25),
              (topics[1], 0, 0, 45), (topics[1], 1, 44, 45)]
    together = consume_ranges(conf, ranges, poll_timeout_ms=30_000)
    for (topic, partition, start, end), got in zip(ranges, together, strict=True):
        alone = list(consume_range(conf, topic, partition, start, end, 30_000))
        assert pa.Table.from_batches(got).equals(pa.Table.from_batches(alone)), (topic, partition)
        assert _offsets(got) == list(range(start, end))


def test_a_range_past_its_partitions_end_is_data_loss_naming_it(
        broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(2)
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2) for i in range(10)])
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    with pytest.raises(DataLossError, match=f"{topic}-1 ends at offset 5"):
        consume_ranges(conf, [(topic, 0, 0, 5), (topic, 1, 0, 9)], poll_timeout_ms=30_000)
    got = consume_ranges(conf, [(topic, 0, 0, 5), (topic, 1, 0, 9)], poll_timeout_ms=30_000,
                         fail_on_data_loss=False)
    assert [_offsets(b) for b in got] == [list(range(5)), list(range(5))]


def test_a_kept_consumer_reads_each_range_exactly_whatever_it_read_before(
        broker: Any, topic_factory: Any) -> None:
    """Reads after the first borrow the process's kept consumer (compactor.kafka.consumer_cache):
    what it fetched for one read never shows in the next, backwards or forwards."""
    from compactor.kafka import consumer_cache

    topic = topic_factory(2)
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v%d" % i, i % 2) for i in range(80)])
    conf = {"bootstrap.servers": broker.bootstrap_servers}
    consumer_cache.close_kept()
    assert [_offsets(b) for b in consume_ranges(conf, [(topic, 0, 10, 40), (topic, 1, 0, 3)],
                                                poll_timeout_ms=30_000)] == [
        list(range(10, 40)), [0, 1, 2]]
    kept = consumer_cache._kept
    assert kept is not None
    assert [_offsets(b) for b in consume_ranges(conf, [(topic, 0, 0, 5), (topic, 1, 30, 40)],
                                                poll_timeout_ms=30_000)] == [
        list(range(5)), list(range(30, 40))]
    assert consumer_cache._kept is not None and consumer_cache._kept[1] is kept[1]
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"w%d" % i, 1) for i in range(10)])
    got = consume_ranges(conf, [(topic, 1, 38, 50)], poll_timeout_ms=30_000)
    assert _offsets(got[0]) == list(range(38, 50))
    assert got[0][-1].column("value").to_pylist()[-1] == b"w9"
    # A read left half-way closes the consumer instead of keeping what it fetched.
    reader = consume_range(conf, topic, 0, 0, 40, 30_000)
    next(reader)
    reader.close()
    assert consumer_cache._kept is None
    assert _offsets(list(consume_range(conf, topic, 0, 39, 40, 30_000))) == [39]
