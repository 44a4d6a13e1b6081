"""The rejected positions a run's plans carry: read once per topic, never again once caught up.

A real lake on disk written through the product's ingest path (null keys of a compacted topic
go to ``L/T/rejected``); no Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compactor.ingest import writer
from compactor.ingest.writer import RejectedPositions, plan_ranges
from tests.lake import append, offline_config

TOPIC = "users"


def test_a_topics_positions_are_read_once_and_a_caught_up_partition_not_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = offline_config(str(tmp_path / "lake"), TOPIC, cleanup_policy="compact")
    now_ms = int(time.time() * 1000)
    # Offsets 0-2 of partition 0, the null key at 1 rejected (the rejected table's position
    # moves to the range's last offset, 2); partition 1 never rejected.
    append(config, TOPIC, 0, [(0, b"a", b"v", now_ms), (1, None, b"v", now_ms),
                              (2, b"b", b"v", now_ms)], now_ms)
    reads: list[str] = []
    real = writer.position_lookup

    def counted(table: Any, uri: str, storage: Any) -> Callable[[str], int | None]:
        reads.append(uri)
        return real(table, uri, storage)

    monkeypatch.setattr(writer, "position_lookup", counted)
    rejected = RejectedPositions()
    first = plan_ranges(config, [(TOPIC, 0, 3, 5)], now_ms, rejected=rejected)
    assert [p.rejected_offset for p in first] == [2] and len(reads) == 1

    # A partition that shows up later in the run is answered from the same read.
    [later] = plan_ranges(config, [(TOPIC, 1, 0, 2)], now_ms, rejected=rejected)
    assert later.rejected_offset is None and len(reads) == 1

    rejected.planned(first)  # its batch committed: partition 0 is caught up
    [again] = plan_ranges(config, [(TOPIC, 0, 5, 6)], now_ms, rejected=rejected)
    assert again.rejected_offset is None and len(reads) == 1

    rejected.forget()  # a batch failed: partitions not caught up are read afresh
    [after] = plan_ranges(config, [(TOPIC, 1, 0, 2)], now_ms, rejected=rejected)
    assert after.rejected_offset is None and len(reads) == 2
    plan_ranges(config, [(TOPIC, 0, 5, 6)], now_ms, rejected=rejected)
    assert len(reads) == 2  # caught up stays caught up
