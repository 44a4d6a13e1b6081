"""Catch-up progress lines: records against the broker's end offsets, rate and time to go."""

from __future__ import annotations

import logging
import threading

import pytest

from compactor.ingest.batch_stats import BatchStats
from compactor.ops.progress import IngestProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stats(records: int, next_offsets: dict[int, int]) -> dict[str, BatchStats]:
    return {"users": BatchStats(records, records * 100, 0, 1, len(next_offsets), next_offsets)}


def test_reports_lag_share_and_time_to_go() -> None:
    clock = Clock()
    ends = {("users", 0): 1000, ("users", 1): 1000}
    progress = IngestProgress(lambda: ends, every_s=5.0, clock=clock)
    clock.now += 5
    progress.on_batch(0, stats(200, {0: 100, 1: 100}))
    progress.wait(30)
    clock.now += 5
    progress.on_batch(1, stats(200, {0: 200, 1: 200}))
    progress.wait(30)
    (line,) = progress.lines(clock.now)
    # 400 records in 10 s is 40/s; 1,600 offsets behind take 40 s at that rate.
    assert "400 records in 10s, 40/s" in line
    assert "lag 1,600 offsets (20.0% of the broker's end)" in line
    assert "about 40s to catch up" in line


def test_caught_up_and_broker_away(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    ends: dict[tuple[str, int], int] = {("users", 0): 50}
    progress = IngestProgress(lambda: ends, every_s=0.0, clock=clock)
    progress.on_batch(0, stats(50, {0: 50}))
    progress.wait(30)
    assert progress.lines(clock.now)[0].endswith("caught up")

    def away() -> dict[tuple[str, int], int]:
        raise RuntimeError("broker away")

    progress = IngestProgress(away, every_s=0.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="compactor.ops.progress"):
        progress.on_batch(0, stats(50, {0: 50}))
        progress.wait(30)
    # Without end offsets the rate is still reported and the mirror is not disturbed.
    assert "lag" not in caplog.text and "50 records" in caplog.text


def test_asks_the_broker_once_per_interval() -> None:
    clock = Clock()
    asked = []
    progress = IngestProgress(lambda: asked.append(1) or {}, every_s=5.0, clock=clock)
    for _ in range(10):
        progress.on_batch(0, stats(1, {0: 1}))
        progress.wait(30)
        clock.now += 1
    assert len(asked) == 2


def test_a_slow_broker_holds_up_no_batch() -> None:
    """The broker is asked from a thread of its own: a batch returns while it is asked, and
    batches meanwhile are counted, not queued behind it."""
    clock = Clock()
    asked, answer = threading.Event(), threading.Event()
    callers = []

    def slow() -> dict[tuple[str, int], int]:
        callers.append(threading.current_thread())
        asked.set()
        answer.wait(10)
        return {("users", 0): 10}

    progress = IngestProgress(slow, every_s=0.0, clock=clock)
    progress.on_batch(0, stats(5, {0: 5}))
    assert asked.wait(30)  # the report thread is in the broker's call
    progress.on_batch(1, stats(5, {0: 10}))  # returns at once; no second report starts
    answer.set()
    progress.wait(30)
    assert progress.lines(clock.now)[0].endswith("caught up")
    assert callers and threading.current_thread() not in callers and len(callers) == 1
