"""Where a partition's range starts: the lake's position decides, the query's follows."""

from __future__ import annotations

import pytest

from compactor.config import build_config
from compactor.exceptions import DataLossError
from compactor.ingest.writer import _lake_start


def _config(**extra: str):
    return build_config({"bootstrap.servers": "b:9092", "topics": "t", "lake.path": "/l",
                         **extra})


@pytest.mark.parametrize(("start", "committed", "log_start", "expected"), [
    (50, 49, 0, 50),    # the lake and the query agree
    (80, 49, 0, 50),    # the lake is behind (restored): read [50, 80) again
    (30, 49, 0, 50),    # the query replays what the lake holds: the task skips it
    (50, None, 0, 0),   # a lake folder moved aside: from the topic's first offset
    (50, None, 20, 20),
])
def test_the_range_starts_at_the_lakes_position(start, committed, log_start, expected) -> None:
    assert _lake_start(_config(), "t", 0, start, committed, log_start) == expected


def test_with_starting_offsets_latest_an_empty_lake_starts_where_the_query_did() -> None:
    assert _lake_start(_config(**{"starting.offsets": "latest"}), "t", 0, 500, None, 0) == 500


def test_offsets_deleted_before_the_lake_had_them_are_data_loss_naming_both() -> None:
    with pytest.raises(DataLossError) as lost:
        _lake_start(_config(), "t", 3, 80, 49, 70)
    message = str(lost.value)
    assert "t-3: the lake holds offsets up to 49" in message
    assert "log now starts at offset 70" in message and "[50, 70)" in message
    assert lost.value.exit_code == 5


def test_without_fail_on_data_loss_the_lost_offsets_are_skipped() -> None:
    config = _config(**{"fail.on.data.loss": "false"})
    assert _lake_start(config, "t", 3, 80, 49, 70) == 70
