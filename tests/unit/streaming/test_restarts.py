"""When a failed mirror query is started again (:mod:`streaming.restarts`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from compactor.ingest.batch_stats import IngestTotals
from streaming.restarts import MAX_IN_A_ROW, Restarts

LATE = RuntimeError("org.apache.spark.SparkException: Python worker failed to connect back.")


@dataclass
class _Mirror:
    failure: BaseException | None = None
    totals: IngestTotals = field(default_factory=IngestTotals)


def test_a_late_python_worker_is_restarted_a_few_times_in_a_row() -> None:
    restarts, mirror = Restarts(), _Mirror()
    assert [restarts.allow(mirror, LATE) for _ in range(MAX_IN_A_ROW + 1)] == \
        [True] * MAX_IN_A_ROW + [False]


def test_a_committed_batch_starts_the_count_again() -> None:
    restarts, mirror = Restarts(max_in_a_row=1), _Mirror()
    assert restarts.allow(mirror, LATE)
    mirror.totals.batches += 1
    assert restarts.allow(mirror, LATE)
    assert not restarts.allow(mirror, LATE)


@pytest.mark.parametrize("failure", [
    RuntimeError("org.apache.spark.SparkException: Job aborted due to stage failure"),
    RuntimeError("DataLossError: partition 3 of t lost offsets 10-19"),
])
def test_any_other_failure_ends_the_run(failure: BaseException) -> None:
    assert not Restarts().allow(_Mirror(), failure)


def test_a_failure_of_the_mirrors_own_batch_ends_the_run() -> None:
    assert not Restarts().allow(_Mirror(failure=ValueError("in the batch")), LATE)


def test_start_tries_again_while_the_start_fails_late() -> None:
    calls: list[bool] = []

    class Starting(_Mirror):
        def start(self, once: bool = False) -> str:
            calls.append(once)
            if len(calls) < 3:
                raise LATE
            return "query"

    assert Restarts().start(Starting(), once=True) == "query"
    assert calls == [True, True, True]
    with pytest.raises(RuntimeError, match="connect back"):
        calls.clear()
        Restarts(max_in_a_row=1).start(Starting(), once=False)
