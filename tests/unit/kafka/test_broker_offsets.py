"""An offsets answer without an offset is a broker failure, never a truncated topic."""

from __future__ import annotations

from compactor.kafka.broker_offsets import missing_offsets


def test_real_offsets_pass() -> None:
    assert missing_offsets({("t", 0): 0, ("t", 1): 1234}) == ""


def test_an_answer_without_an_offset_names_the_partition_and_value() -> None:
    # librdkafka leaves -1001 (RD_KAFKA_OFFSET_INVALID) in a partition it got no answer for.
    problem = missing_offsets({("t", 0): 100, ("t", 1): -1001, ("u", 3): -1})
    assert "t-1 (-1001)" in problem and "u-3 (-1)" in problem
    assert "t-0" not in problem
