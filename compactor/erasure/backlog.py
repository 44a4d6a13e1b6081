"""The erasure backlog followed commit by commit: what the metrics and ``status`` show, at a
cost that does not grow with the ledger's history.

The ledger (:mod:`compactor.erasure.ledger`) keeps every tombstone and done event for
``erasure.ledger.retention.ms`` after its erasure finished (7 days by default), a few hundred
thousand rows a day on a busy topic. Reading it whole for each metrics refresh
would make a mirror that serves ``metrics.port`` slower every day. :class:`BacklogFollower`
reads it whole once, keeps only the erasures some target has not finished (and how many
finished late), then reads only the commits written since.

Protocol of :meth:`BacklogFollower.backlog` (under its lock):

1. At the first call, or after step 4: open the ledger with delta-rs at its latest version,
   read its events and each partition's scan position (``compactor-ledger-<p>``), and feed
   them to a :class:`BacklogState`: the positions, then the tombstones in offset order, then
   the done events in time order, so each offset takes the earliest done event covering it.
2. Read ``<version + 1>.json``, ``<version + 2>.json``, ... until one does not exist; for each
   commit feed the events of the files it adds with ``dataChange`` (a compaction of the
   ledger rewrites events without changing them, and is skipped), then its scan positions.
3. Count the backlog from the state: pending erasures, the oldest one's age, and deadlines
   missed (finished late, or pending past the deadline).
4. Start over at step 1 when the log moved past us or the table was replaced
   (:class:`compactor.lake.commit_files.OvertakenCheck`), or a commit removed events (the
   ledger's retention, :mod:`compactor.erasure.ledger_retention`; its DELETE also adds the
   rewritten files' surviving events, which must not be counted twice).

Between reloads a done event is applied in commit order, so it is exact while each target's
clock moves forward; a done event that covers no offset beyond the target's last one changes
nothing, where a full read would take its time if it were earlier. That can only make an
erasure look later than it was (never earlier), as the ledger's repairs can.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compactor.exceptions import LakeError
from compactor.lake.app_transactions import position_lookup
from compactor.lake.commit_files import Overtaken, OvertakenCheck, read_commit
from compactor.lake.layout import join, open_table
from compactor.lake.storage import Storage
from compactor.positions import LEDGER, PRUNED_LATE

_EVENT_COLUMNS = ["event", "partition", "offset", "tombstoneTimeMs", "deadlineMs", "target",
                  "atMs"]
_LEDGER_APP = LEDGER.id(0)[:-1]  # "compactor-ledger-"
# The event kind, for dataset filters. Files delta-rs's DELETE rewrote (the ledger's retention)
# hold it as string_view, and pyarrow 26 compares a view column to a string literal with no
# kernel at all ("no kernel matching input types (string, string_view)"); cast, it takes both.
EVENT = pc.field("event").cast(pa.string())


@dataclass(frozen=True)
class Backlog:
    """Erasures not finished by every target."""

    pending: int
    oldest_pending_age_ms: int | None
    missed_deadlines: int  # pending past their deadline, or finished after it


@dataclass
class _Pending:
    offset: int
    tombstone_ms: int
    deadline_ms: int | None
    done_at: dict[str, int] = field(default_factory=dict)  # target -> when it finished


class _Partition:
    """One partition's unfinished erasures in offset order. Targets finish a prefix of the
    offsets, so what is pending is always a suffix: finished ones leave from the front."""

    def __init__(self) -> None:
        self.entries: list[_Pending] = []
        self.offsets: list[int] = []
        self.start = 0  # entries before this index have left

    def pending(self) -> list[_Pending]:
        return self.entries[self.start:]

    def covering(self, after: int, upto: int) -> list[_Pending]:
        lo = bisect.bisect_right(self.offsets, after, self.start)
        hi = bisect.bisect_right(self.offsets, upto, lo)
        return self.entries[lo:hi]

    def drop_front(self, n: int) -> None:
        self.start += n
        if self.start > 1024 and self.start * 2 > len(self.entries):
            del self.entries[:self.start], self.offsets[:self.start]
            self.start = 0


class _Ahead:
    """One target's done events of a partition beyond the ledger's scan position, which cover
    tombstones not recorded yet. Only events no other beats (a higher offset finished no
    later) are kept, in offset order, so their times rise too and the earliest event covering
    an offset is the first at or above it."""

    def __init__(self) -> None:
        self.ups: list[int] = []
        self.ats: list[int] = []

    def add(self, upto: int, at_ms: int) -> None:
        i = bisect.bisect_left(self.ups, upto)
        if i < len(self.ups) and self.ats[i] <= at_ms:
            return  # beaten: a kept event covers as much, no later
        j = bisect.bisect_right(self.ups, upto)
        k = j
        while k > 0 and self.ats[k - 1] >= at_ms:
            k -= 1  # these cover less, no earlier
        self.ups[k:j] = [upto]
        self.ats[k:j] = [at_ms]

    def earliest(self, offset: int) -> int | None:
        i = bisect.bisect_left(self.ups, offset)
        return self.ats[i] if i < len(self.ats) else None

    def drop_upto(self, offset: int) -> None:
        i = bisect.bisect_right(self.ups, offset)
        del self.ups[:i], self.ats[:i]


class BacklogState:
    """The unfinished erasures of one topic, fed the ledger's events (pure; no I/O)."""

    def __init__(self, targets: list[str]) -> None:
        self._targets = list(targets)
        self._parts: dict[int, _Partition] = {}
        self._through: dict[tuple[str, int], int] = {}  # highest offset a target finished
        # done events beyond the scan position: they cover tombstones not recorded yet
        self._ahead: dict[tuple[str, int], _Ahead] = {}
        self._scanned: dict[int, int] = {}
        self.finished_late = 0
        # late ones the ledger's retention removed (``compactor-pruned-late``): still missed
        self.pruned_late = 0

    def scanned(self, partition: int, offset: int) -> None:
        """The ledger recorded every tombstone of ``partition`` up to ``offset``."""
        self._scanned[partition] = max(offset, self._scanned.get(partition, -1))
        for target in self._targets:
            ahead = self._ahead.get((target, partition))
            if ahead is not None:
                ahead.drop_upto(self._scanned[partition])

    def tombstone(self, partition: int, offset: int, tombstone_ms: int,
                  deadline_ms: int | None) -> None:
        entry = _Pending(offset, tombstone_ms, deadline_ms)
        for target in self._targets:
            ahead = self._ahead.get((target, partition))
            at = ahead.earliest(offset) if ahead is not None else None
            if at is not None:
                entry.done_at[target] = at
        if len(entry.done_at) == len(self._targets):
            self._finish(entry)
            return
        self.add_pending(partition, entry)

    def done(self, target: str, partition: int, upto: int, at_ms: int) -> None:
        """``target`` finished every tombstone of ``partition`` up to ``upto`` at ``at_ms``."""
        if target not in self._targets:
            return  # a target this configuration no longer has
        key = (target, partition)
        through = self._through.get(key, -1)
        if upto <= through:
            return
        self._through[key] = upto
        if upto > self._scanned.get(partition, -1):
            self._ahead.setdefault(key, _Ahead()).add(upto, at_ms)
        part = self._parts.get(partition)
        if part is None:
            return
        for entry in part.covering(through, upto):
            entry.done_at.setdefault(target, at_ms)
        finished = 0
        while part.start + finished < len(part.entries):
            entry = part.entries[part.start + finished]
            if len(entry.done_at) < len(self._targets):
                break
            self._finish(entry)
            finished += 1
        part.drop_front(finished)

    def seed(self, target: str, partition: int, ups: np.ndarray, ats: np.ndarray) -> None:
        """A full load's done events of one target and partition (see :func:`state_of`)."""
        key = (target, partition)
        self._through[key] = max(self._through.get(key, -1), int(ups.max()))
        beyond = ups > self._scanned.get(partition, -1)
        if beyond.any():
            ahead = self._ahead.setdefault(key, _Ahead())
            order = np.argsort(ups[beyond], kind="stable")  # in offset order: each add appends
            for upto, at in zip(ups[beyond][order].tolist(), ats[beyond][order].tolist(),
                                strict=True):
                ahead.add(upto, at)

    def add_pending(self, partition: int, entry: _Pending) -> None:
        """A full load's pending erasure, in offset order (see :func:`state_of`)."""
        part = self._parts.setdefault(partition, _Partition())
        part.entries.append(entry)
        part.offsets.append(entry.offset)

    def through(self, target: str, partition: int) -> int:
        """The highest offset of ``partition`` that ``target`` has finished (-1: none)."""
        return self._through.get((target, partition), -1)

    def pending_offsets(self) -> dict[int, list[int]]:
        """Per partition, the offsets of the erasures some target has not finished."""
        return {p: part.offsets[part.start:] for p, part in self._parts.items()
                if len(part.offsets) > part.start}

    def _finish(self, entry: _Pending) -> None:
        done = max(entry.done_at.values())
        if entry.deadline_ms is not None and done > entry.deadline_ms:
            self.finished_late += 1

    def backlog(self, now_ms: int) -> Backlog:
        pending = missed = 0
        oldest: int | None = None
        for part in self._parts.values():
            for entry in part.pending():
                pending += 1
                age = now_ms - entry.tombstone_ms
                oldest = age if oldest is None else max(oldest, age)
                missed += int(entry.deadline_ms is not None and now_ms > entry.deadline_ms)
        return Backlog(pending, oldest, missed + self.finished_late + self.pruned_late)

    def feed(self, rows: list[dict[str, Any]]) -> None:
        """Events of one commit, in the order written."""
        for r in rows:
            if r["event"] == "tombstone":
                self.tombstone(r["partition"], r["offset"], r["tombstoneTimeMs"],
                               r["deadlineMs"])
            elif r["event"] == "done":
                self.done(r["target"], r["partition"], r["offset"], r["atMs"])


def state_of(tomb: pa.Table, done: pa.Table, scanned: Mapping[int, int],
             targets: list[str]) -> BacklogState:
    """The backlog state (step 1) from a whole ledger's events (its tombstone and its done events,
    in any order), column by column: only the pending erasures become Python objects, so a ledger
    of millions of events loads in seconds, in the memory of its numeric columns.

    Per partition and target, the done events sorted by offset with a running minimum of
    their times from the highest offset down answer "the earliest done event covering this
    offset" for every tombstone by binary search, as :class:`~compactor.erasure.ledger
    .DoneIndex` does one at a time."""
    state = BacklogState(targets)
    for partition, offset in scanned.items():
        state.scanned(partition, offset)
    t_part = tomb["partition"].to_numpy(zero_copy_only=False).astype(np.int64)
    t_off = tomb["offset"].to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((t_off, t_part))
    t_part, t_off = t_part[order], t_off[order]
    t_ms = tomb["tombstoneTimeMs"].to_numpy(zero_copy_only=False).astype(np.int64)[order]
    deadlines = tomb["deadlineMs"].take(pa.array(order))
    has_deadline = deadlines.is_valid().to_numpy(zero_copy_only=False)
    t_deadline = deadlines.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    d_part = done["partition"].to_numpy(zero_copy_only=False).astype(np.int64)
    d_off = done["offset"].to_numpy(zero_copy_only=False).astype(np.int64)
    d_at = done["atMs"].to_numpy(zero_copy_only=False).astype(np.int64)
    d_target = {t: pc.equal(done["target"], t).fill_null(False).to_numpy(zero_copy_only=False)
                for t in targets}
    parts, starts = np.unique(t_part, return_index=True)
    ends = [*starts[1:].tolist(), len(t_part)] if len(starts) else []
    bounds = dict(zip(parts.tolist(), zip(starts.tolist(), ends, strict=True), strict=True))
    for partition in sorted(set(bounds) | set(np.unique(d_part).tolist())):
        lo, hi = bounds.get(partition, (0, 0))
        offsets = t_off[lo:hi]
        finished = np.ones(hi - lo, dtype=bool)
        done_ms = np.zeros(hi - lo, dtype=np.int64)
        at_by_target: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for target in targets:
            mine = (d_part == partition) & d_target[target]
            ups, ats = d_off[mine], d_at[mine]
            if not len(ups):
                finished[:] = False
                continue
            state.seed(target, partition, ups, ats)
            by_up = np.argsort(ups, kind="stable")
            ups, ats = ups[by_up], ats[by_up]
            earliest = np.minimum.accumulate(ats[::-1])[::-1]  # min time over this and above
            i = np.searchsorted(ups, offsets, side="left")
            covered = i < len(ups)
            at = np.where(covered, earliest[np.minimum(i, len(ups) - 1)], 0)
            at_by_target[target] = (covered, at)
            finished &= covered
            done_ms = np.maximum(done_ms, at)
        late = finished & has_deadline[lo:hi] & (done_ms > t_deadline[lo:hi])
        state.finished_late += int(late.sum())
        for k in np.flatnonzero(~finished).tolist():
            state.add_pending(partition, _Pending(
                int(offsets[k]), int(t_ms[lo + k]),
                int(t_deadline[lo + k]) if has_deadline[lo + k] else None,
                {t: int(at[k]) for t, (covered, at) in at_by_target.items() if covered[k]}))
    return state


class BacklogFollower:
    """One topic's backlog, advanced from the ledger's new commits only."""

    def __init__(self, uri: str, storage: Storage, targets: list[str]) -> None:
        self.uri = uri
        self._storage = storage
        self._overtaken = OvertakenCheck(self.uri, storage)
        self._targets = targets
        self._lock = threading.Lock()
        self._state: BacklogState | None = None
        self._version = -1
        self._table_id = ""
        self.full_loads = 0  # how often step 1 ran: a figure for tests

    def backlog(self, now_ms: int) -> Backlog:
        """What is pending now: the ledger followed to its latest version (steps 1-3); an empty
        backlog while the ledger does not exist."""
        with self._lock:
            state = self._latest()
            return Backlog(0, None, 0) if state is None else state.backlog(now_ms)

    def state(self) -> BacklogState | None:
        """The backlog state at the ledger's latest version (steps 1-2) (None: no ledger yet), for a
        caller that reads it before anything else moves it (``reconcile`` at start)."""
        with self._lock:
            return self._latest()

    def _latest(self) -> BacklogState | None:
        if self._state is None and not self._load():
            return None
        try:
            self._advance()
        except Overtaken:
            self._state = None
            if not self._load():
                return None
            self._advance()
        return self._state

    def _load(self) -> bool:
        table = open_table(self.uri, self._storage)
        if table is None:
            return False
        dataset = table.to_pyarrow_dataset()  # each kind of event apart: no copy of the whole
        tomb = dataset.to_table(columns=["partition", "offset", "tombstoneTimeMs", "deadlineMs"],
                                filter=EVENT == "tombstone")
        done = dataset.to_table(columns=["partition", "offset", "target", "atMs"],
                                filter=EVENT == "done")
        partitions = set(pc.unique(tomb["partition"]).to_pylist()) | set(
            pc.unique(done["partition"]).to_pylist())
        position = position_lookup(table, self.uri, self._storage)  # one read, not one each
        scanned = {p: s for p in partitions if (s := position(LEDGER.id(p))) is not None}
        self._state = state_of(tomb, done, scanned, self._targets)
        self._state.pruned_late = position(PRUNED_LATE.id()) or 0
        self._version = table.version()
        self._table_id = str(table.metadata().id)
        self.full_loads += 1
        return True

    def _advance(self) -> None:
        assert self._state is not None
        while True:
            actions = read_commit(self.uri, self._storage, self._version + 1)
            if actions is None:
                self._overtaken(self._version)
                return
            scanned: list[tuple[int, int]] = []
            for action in actions:
                if "metaData" in action and str(action["metaData"].get("id")) != self._table_id:
                    raise Overtaken
                if "remove" in action and action["remove"].get("dataChange", True):
                    raise Overtaken  # the ledger's retention removed events: read it again
                if "add" in action and action["add"].get("dataChange", True):
                    self._state.feed(self._rows(action["add"]["path"]))
                elif "txn" in action and action["txn"]["appId"].startswith(_LEDGER_APP):
                    partition = action["txn"]["appId"][len(_LEDGER_APP):]
                    if partition.isdigit():
                        scanned.append((int(partition), int(action["txn"]["version"])))
            for partition, offset in scanned:
                self._state.scanned(partition, offset)
            self._version += 1

    def _rows(self, path: str) -> list[dict[str, Any]]:
        fs, file = self._storage.filesystem(join(self.uri, unquote(path)))
        try:
            rows: list[dict[str, Any]] = pq.read_table(
                file, filesystem=fs, columns=_EVENT_COLUMNS).to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot read {path} of the erasure ledger {self.uri}: "
                            f"{exc}") from exc
        return rows
