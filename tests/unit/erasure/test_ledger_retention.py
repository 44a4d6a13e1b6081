"""The ledger's retention removes only what no figure needs: a backlog loaded from what a
prune left (with its count of late erasures) and followed on counts what the whole history
counts."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from compactor.erasure.backlog import state_of
from compactor.erasure.ledger_retention import check_every_ms, prune_bounds
from tests.unit.erasure.test_backlog import (
    SCHEMA,
    TARGETS,
    follow,
    left_by,
    reference,
    run,
    split,
    steps,
)


def prune(events: list[dict[str, Any]], scanned: dict[int, int], cutoff: int
          ) -> tuple[list[dict[str, Any]], dict[int, int], int]:
    """What :class:`LedgerRetention` keeps of ``events`` at ``cutoff``, its bounds and its
    count of late erasures among those it removes (steps 2-4, without the Delta table)."""
    done_before: dict[tuple[str, int], int] = {}
    for e in events:
        if e["event"] == "done" and e["atMs"] < cutoff:
            key = (e["target"], e["partition"])
            done_before[key] = max(e["offset"], done_before.get(key, -1))
    bounds = prune_bounds(done_before, scanned, {}, TARGETS)
    gone = [e for e in events if e["offset"] <= bounds.get(e["partition"], -1)]
    kept = [e for e in events if e["offset"] > bounds.get(e["partition"], -1)]
    before = [e for e in events if e["event"] == "done" and e["atMs"] < cutoff]
    tomb, _ = split(pa.Table.from_pylist(gone, schema=SCHEMA))
    _, done = split(pa.Table.from_pylist(before, schema=SCHEMA))
    late = state_of(tomb, done, scanned, TARGETS).finished_late
    return kept, bounds, late


# More examples than Hypothesis's 100: a late erasure removed, or a done event ahead of the
# scan before the cutoff with its tombstones recorded after the prune, take a few hundred.
@settings(deadline=None, max_examples=600)
@given(steps, st.integers(0, 40), st.integers(0, 120), st.integers(0, 100))
# Both targets report done up to 4 while the scan is at 1; the prune comes after, and the scan
# records offsets 2-5 later: the done events up to 4 must still be there for them.
@example([("scan", 0, 2, [True] * 6), ("done", 0, "log", 3), ("done", 0, "table", 3),
          ("done", 0, "log", -6), ("scan", 0, 4, [True] * 6)], 4, 0, 0)
def test_a_pruned_ledger_counts_what_the_whole_history_counts(plan, cut, age, later) -> None:
    """A prune of the ledger as the first ``cut`` commits left it, with a cutoff ``age`` ms
    before its last commit; a process then starts on what is left and follows the rest."""
    commits, _, clock = run(plan)
    events, scanned = left_by(commits, cut)
    now = max((r["atMs"] for r in events), default=0)
    kept, bounds, late = prune(events, scanned, now - age)
    for p, bound in bounds.items():
        assert bound <= scanned[p]  # nothing above the scan: its done events wait for tombstones
    state = state_of(*split(pa.Table.from_pylist(kept, schema=SCHEMA)), scanned, TARGETS)
    state.pruned_late = late
    follow(state, commits[cut:])
    every = [r for rows in commits for r in rows if r["event"] != "scan"]
    assert state.backlog(clock + later) == reference(every, clock + later)


def test_what_some_target_has_not_finished_before_the_cutoff_stays() -> None:
    done = {("log", 0): 9, ("table", 0): 4, ("log", 1): 7}  # partition 1: no table event
    assert prune_bounds(done, {0: 6, 1: 8}, {}, ["log", "table"]) == {0: 4}
    assert prune_bounds(done, {0: 3, 1: 8}, {}, ["log", "table"]) == {0: 3}  # the scan caps it
    assert prune_bounds(done, {0: 6, 1: 8}, {0: 4}, ["log", "table"]) == {}  # pruned already
    # a downstream target added later has reported nothing: everything stays
    assert prune_bounds(done, {0: 6}, {}, ["log", "table", "downstream:d"]) == {}


def test_a_topic_is_checked_a_24th_of_its_retention_apart_and_at_most_once_a_minute() -> None:
    assert check_every_ms(7 * 86_400_000) == 7 * 3_600_000
    assert check_every_ms(0) == 60_000
