import pytest

from streaming.exceptions import KafkaSourceError
from streaming.offset_planning import (
    OffsetRange,
    parse_starting_offsets,
    rate_limit,
)


def test_rate_limit_shares_in_proportion_to_backlog() -> None:
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 100, 200), OffsetRange("t", 2, 5, 5)]
    cut = rate_limit(ranges, 100)
    assert [r.size for r in cut] == [90, 10, 0]
    assert [r.start for r in cut] == [0, 100, 5]


def test_rate_limit_lets_every_backlogged_partition_advance() -> None:
    ranges = [OffsetRange("t", p, 0, 1000 if p == 0 else 1) for p in range(4)]
    assert all(r.size >= 1 for r in rate_limit(ranges, 10))


def test_rate_limit_is_a_no_op_below_the_limit() -> None:
    ranges = [OffsetRange("t", 0, 0, 5)]
    assert rate_limit(ranges, 10) == ranges


def test_starting_offsets_forms() -> None:
    assert parse_starting_offsets("earliest") == "earliest"
    assert parse_starting_offsets(' {"a": {"0": 5, "1": -2}} ') == {"a": {"0": 5, "1": -2}}


@pytest.mark.parametrize("bad", ["middle", '{"a": 5}', '{"a": {"x": 1}}', "[1]"])
def test_bad_starting_offsets_are_refused(bad: str) -> None:
    with pytest.raises(KafkaSourceError, match="startingOffsets"):
        parse_starting_offsets(bad)

