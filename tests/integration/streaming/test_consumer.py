"""Reading many partitions' ranges with one consumer, against the test broker."""

from __future__ import annotations

from typing import Any

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
