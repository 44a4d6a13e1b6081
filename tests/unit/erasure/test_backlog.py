"""The followed backlog counts what a full read of the ledger counts, fed commit by commit or
loaded whole."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.erasure.backlog import Backlog, BacklogState, state_of

TARGETS = ["log", "table"]
SCHEMA = pa.schema([("event", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                    ("tombstoneTimeMs", pa.int64()), ("deadlineMs", pa.int64()),
                    ("target", pa.string()), ("atMs", pa.int64())])


def reference(events: list[dict[str, Any]], now: int) -> Backlog:
    """The definition: an erasure is done when every target has a done event covering its
    offset, at the latest of each target's earliest such event."""
    pending = missed = 0
    oldest: int | None = None
    for t in (e for e in events if e["event"] == "tombstone"):
        ends = []
        for target in TARGETS:
            covering = [d["atMs"] for d in events if d["event"] == "done"
                        and d["target"] == target and d["partition"] == t["partition"]
                        and d["offset"] >= t["offset"]]
            ends.append(min(covering) if covering else None)
        done = None if None in ends else max(e for e in ends if e is not None)
        if done is None:
            pending += 1
            age = now - t["tombstoneTimeMs"]
            oldest = age if oldest is None else max(oldest, age)
        deadline = t["deadlineMs"]
        missed += int(deadline is not None and (done if done is not None else now) > deadline)
    return Backlog(pending, oldest, missed)


# A run of the mirror, one step per commit: a scan of partition p that records the tombstones
# among the next n offsets, or a target finishing p up to an offset near the scan, the clock
# moving on.
steps = st.lists(st.one_of(
    st.tuples(st.just("scan"), st.integers(0, 2), st.integers(1, 6),
              st.lists(st.booleans(), min_size=6, max_size=6)),
    st.tuples(st.just("done"), st.integers(0, 2), st.sampled_from(TARGETS),
              st.integers(-6, 3)),  # up to an offset near the scan, behind or ahead of it
), max_size=40)


def run(plan: list[Any]) -> tuple[list[list[dict[str, Any]]], dict[int, int], int]:
    """The commits (event rows each) a plan writes, the scan positions, and the clock."""
    commits: list[list[dict[str, Any]]] = []
    scanned: dict[int, int] = {}
    clock = 1_000
    for step in plan:
        clock += 7
        if step[0] == "scan":
            _, p, n, marks = step
            lo = scanned.get(p, -1)
            commits.append([
                {"event": "tombstone", "partition": p, "offset": o, "tombstoneTimeMs": clock - o,
                 "deadlineMs": None if o % 5 == 0 else clock + 7 * (o % 5), "target": None,
                 "atMs": clock, "scanned": lo + n}
                for o in range(lo + 1, lo + n + 1) if marks[o - lo - 1]
            ] or [{"event": "scan", "partition": p, "scanned": lo + n}])
            scanned[p] = lo + n
        else:
            _, p, target, near = step
            upto = scanned.get(p, -1) + near
            commits.append([{"event": "done", "partition": p, "offset": upto,
                             "target": target, "atMs": clock}])
    return commits, scanned, clock


def split(events: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A ledger's tombstone events and its done events, as the follower reads them."""
    return (events.filter(pc.equal(events["event"], "tombstone")),
            events.filter(pc.equal(events["event"], "done")))


def left_by(commits: list[list[dict[str, Any]]], cut: int
            ) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The ledger's events and scan positions as its first ``cut`` commits left it."""
    loaded = [r for rows in commits[:cut] for r in rows]
    scanned: dict[int, int] = {}
    for r in loaded:
        if "scanned" in r:
            scanned[r["partition"]] = max(r["scanned"], scanned.get(r["partition"], -1))
    return [r for r in loaded if r["event"] != "scan"], scanned


def follow(state: BacklogState, commits: list[list[dict[str, Any]]]) -> None:
    """Feed commits as the follower does: each commit's events, then its scan positions."""
    for rows in commits:
        state.feed([r for r in rows if r["event"] != "scan"])
        for r in rows:
            if "scanned" in r:
                state.scanned(r["partition"], r["scanned"])


@given(steps, st.integers(0, 100))
def test_fed_commit_by_commit_it_counts_what_a_full_read_counts(plan, later) -> None:
    commits, _, clock = run(plan)
    state = BacklogState(TARGETS)
    follow(state, commits)
    events = [r for rows in commits for r in rows if r["event"] != "scan"]
    assert state.backlog(clock + later) == reference(events, clock + later)


@settings(deadline=None)  # the first example pays Arrow's compute kernels' start-up
@given(steps, st.integers(0, 40), st.integers(0, 100), st.randoms())
def test_loaded_whole_in_any_order_then_followed_it_counts_what_a_full_read_counts(
        plan, cut, later, rnd) -> None:
    """A process starts on the ledger as the first ``cut`` commits left it, then follows the
    rest commit by commit."""
    commits, _, clock = run(plan)
    events, scanned = left_by(commits, cut)
    rnd.shuffle(events)
    state = state_of(*split(pa.Table.from_pylist(events, schema=SCHEMA)), scanned, TARGETS)
    follow(state, commits[cut:])
    every = [r for rows in commits for r in rows if r["event"] != "scan"]
    assert state.backlog(clock + later) == reference(every, clock + later)


def test_a_done_event_ahead_of_the_scan_covers_the_tombstones_recorded_after_it() -> None:
    state = BacklogState(TARGETS)
    state.done("log", 0, 10, 100)  # the log was cleaned past what the ledger has scanned
    state.done("table", 0, 4, 110)
    state.tombstone(0, 3, 50, 200)  # recorded later; both targets already cover it
    state.tombstone(0, 7, 50, 105)  # the table does not cover it yet
    state.scanned(0, 8)
    assert state.backlog(120) == Backlog(1, 70, 1)  # offset 7 is pending past its deadline
    state.done("table", 0, 8, 130)
    assert state.backlog(140) == Backlog(0, None, 1)  # it finished at 130, after 105


def _table(*rows: tuple[str, int, int, int | None, str | None, int]) -> pa.Table:
    """(event, partition, offset, deadline, target, at) rows; a tombstone's time is 0."""
    return pa.Table.from_pylist([
        {"event": e, "partition": p, "offset": o, "tombstoneTimeMs": 0 if e == "tombstone"
         else None, "deadlineMs": d, "target": t, "atMs": at} for e, p, o, d, t, at in rows],
        schema=SCHEMA)


def test_a_full_load_takes_the_earliest_done_event_covering_an_offset() -> None:
    # The log finished up to 5 at 10, then (a repair) up to 3 at 20: offset 2 was done at 10.
    state = state_of(*split(_table(
        ("tombstone", 0, 2, 15, None, 0), ("done", 0, 3, None, "log", 20),
        ("done", 0, 5, None, "log", 10), ("done", 0, 5, None, "table", 10))), {0: 5}, TARGETS)
    assert state.backlog(30) == Backlog(0, None, 0)  # finished at 10, inside its deadline 15


def test_a_full_load_keeps_done_events_ahead_of_the_scan_for_tombstones_recorded_later() -> None:
    state = state_of(*split(_table(("done", 0, 9, None, "log", 10))), {0: 4}, TARGETS)
    state.feed([{"event": "tombstone", "partition": 0, "offset": 7, "tombstoneTimeMs": 5,
                 "deadlineMs": 100}])
    state.scanned(0, 8)
    state.done("table", 0, 8, 12)
    assert state.backlog(30) == Backlog(0, None, 0)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 50)), max_size=25),
       st.integers(-1, 31))
def test_done_events_ahead_of_the_scan_answer_the_earliest_covering_an_offset(
        events, dropped) -> None:
    from compactor.erasure.backlog import _Ahead

    ahead = _Ahead()
    for upto, at in events:
        ahead.add(upto, at)
    ahead.drop_upto(dropped)  # the scan moved: tombstones up to it are recorded
    for offset in range(dropped + 1, 32):
        covering = [at for upto, at in events if upto >= offset]
        assert ahead.earliest(offset) == (min(covering) if covering else None)
