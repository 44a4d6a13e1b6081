"""A log followed commit by commit, so that per-batch work does not grow with its history.

Opening ``L/T/log`` with delta-rs replays its checkpoint and every add action, and turning
those actions into :class:`DataFile` objects is Python work per file, paid by each reader after
each micro-batch
(the writer's plan, the latest-value table, the erasure ledger, the downstream eraser) and by
the cleaner's scheduler. A :class:`LogFollower` pays that once per process and then reads only
the commit files written since (``_delta_log/<version>.json``: the adds, removes and app
transactions of one commit), so a micro-batch costs the same over a day-old log and a
year-old one. The state is still only what the Delta log committed; nothing is kept on the
side, and a new process starts from a full read.

Protocol of :meth:`LogFollower.view` (under the follower's lock):

1. At the first call, or after step 4: open the table with delta-rs at its latest version
   and take its files and table id; app transactions are looked up in that snapshot
   when first asked for. The delta-rs table is opened again at each checkpoint this process
   writes (and, for commits delta-rs makes, once a checkpoint interval has passed), never
   advanced past one: a delta-rs table advanced in place (deltalake 1.6) keeps every commit
   since it was opened, in memory and in the work of each further advance, until log
   cleanup deletes the commit files (``bench/log_follower.py``). Our files and positions
   are kept: that table is only where positions we never saw move are looked up.
2. Read ``<version + 1>.json``, ``<version + 2>.json``, ... until one does not exist; apply
   each commit's ``remove`` (the file leaves), ``add`` (the file joins) and ``txn`` (the
   position moves) actions in order, and mark the partitions they touch.
3. Rebuild the :class:`PartitionLog` (and rewrite fence) of marked partitions only; return
   a frozen view.
4. Start over at step 1 when a commit file is unreadable or has an action we do not know
   how to apply (a ``metaData`` action with another table id: the table was replaced), or
   when the log moved past us: the next commit file is missing but ``_last_checkpoint``
   names a later version (log cleanup removed commits we never read), or our own version's
   commit file is gone while no checkpoint covers it (the table was deleted and recreated).
   A table deleted and recreated under a running process that has already passed our version
   is not noticed here: deleting a live log is outside what a running mirror survives.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from compactor.exceptions import LakeError
from compactor.lake import checkpoints
from compactor.lake.app_transactions import app_transactions
from compactor.lake.commit_files import (
    Conflict,
    Overtaken,
    OvertakenCheck,
    link,
    put_if_absent,
    read_commit,
    remove_stale_temporaries,
)
from compactor.lake.layout import join, open_table
from compactor.lake.segments import (
    DataFile,
    PartitionLog,
    Segment,
    _files_from_actions,
    file_from_add,
)
from compactor.lake.storage import Storage, is_local, local_path
from compactor.positions import CLEANER, INGEST, REWRITE

log = logging.getLogger(__name__)

# Writer versions whose rules an append of ours obeys (1: none; 2: appendOnly, column
# invariants; we set neither). Tables with table features (7) are committed by delta-rs.
_PLAIN_WRITER_VERSIONS = (1, 2)
_DEFAULT_CHECKPOINT_INTERVAL = 100
_APPEND_ATTEMPTS = 5


@dataclass(frozen=True)
class LogView:
    """One version of a log: what a reader needs, without a delta-rs snapshot of it."""

    uri: str
    version: int
    table_id: str
    partitions: Mapping[int, PartitionLog]
    rewrites: Mapping[int, int]  # per partition the REWRITE fence (0 before the first)


class LogFollower:
    """The live files and positions of one log table, advanced from new commits only."""

    def __init__(self, uri: str, storage: Storage) -> None:
        self.uri = uri
        self._storage = storage
        self._overtaken = OvertakenCheck(uri, storage)
        self._lock = threading.Lock()
        self._base: DeltaTable | None = None
        self.base_opened_at = -1  # the version self._base was opened at: for tests, benchmarks
        self._version = -1
        self._table_id = ""
        # (partition, segment) -> path -> file; a path's (partition, segment); built segments
        self._files: dict[tuple[int, int], dict[str, DataFile]] = {}
        self._where: dict[str, tuple[int, int]] = {}
        self._segments: dict[int, dict[int, Segment]] = {}
        self._txns: dict[str, int | None] = {}  # moved since the base snapshot, or found in it
        self._all_txns = False  # _txns holds every app transaction of the base snapshot
        self._logs: dict[int, PartitionLog] = {}
        self._rewrites: dict[int, int] = {}  # per partition of _logs its REWRITE fence
        self._dirty: set[int] = set()  # partitions whose PartitionLog is rebuilt
        self._dirty_segments: set[tuple[int, int]] = set()  # segments rebuilt from their files
        self._plain = False  # its protocol lets :meth:`append` write commit files
        self._checkpoint_interval = _DEFAULT_CHECKPOINT_INTERVAL
        self.full_loads = 0  # how often step 1 ran: a figure for tests and benchmarks

    def view(self, partitions: Iterable[int] = ()) -> LogView | None:
        """The log at its latest committed version, with an entry for each partition that has
        files or is named in ``partitions``; None when the table does not exist."""
        with self._lock:
            if not self._latest():
                return None
            self._dirty.update(p for p in partitions if p not in self._logs)
            self._rebuild()
            return LogView(self.uri, self._version, self._table_id, dict(self._logs),
                           dict(self._rewrites))

    def table_for_commit(self) -> DeltaTable:
        """This follower's delta-rs table, brought to the latest version, for a commit.

        delta-rs advances a loaded table by the new commits (``update_incremental``) for less
        than a fresh open costs, until a checkpoint interval has passed since it was opened:
        then it is opened again, from the newest checkpoint (step 1). Callers commit under the
        run's commit lock, so nothing else moves the table between this call and their
        commit. Only here and in a checkpoint (:meth:`append`) is the table moved, under the
        follower's lock; here every newer commit file is then read, as :meth:`view` does
        before it looks a position up in it, and a checkpoint opens it at our own version, so
        a lookup never sees a version the view has not reached.
        """
        with self._lock:
            if self._base is None and not self._load():
                raise LakeError(f"lake log {self.uri} does not exist")
            assert self._base is not None
            try:
                if self._version - self.base_opened_at >= self._checkpoint_interval:
                    if not self._adopt(self._storage.table(self.uri)):
                        raise Overtaken
                else:
                    self._base.update_incremental()
            except (TableNotFoundError, Overtaken):
                if not self._load():  # gone, or replaced by another table
                    raise LakeError(f"lake log {self.uri} does not exist") from None
            except Exception as exc:  # delta-rs raises several classes for a broken log
                raise LakeError(f"cannot read Delta table {self.uri}: {exc}") from exc
            try:
                self._advance()  # our positions at least as new as the table's
            except Overtaken:
                if not self._load():
                    raise LakeError(f"lake log {self.uri} does not exist") from None
            assert self._base is not None
            return self._base

    def append(self, lines: list[str], check: Callable[[Callable[[str], int | None]], None],
               removed: Sequence[str] = (), staged: str | None = None,
               actions: Sequence[dict[str, Any]] | None = None,
               known: Mapping[str, DataFile] | None = None) -> int | None:
        """Commit ``lines`` as the next version once ``check`` passes against the positions
        there and the ``removed`` paths are live; the version, or None when this log's commits
        must go through delta-rs (object storage, table features). ``staged``: a durable
        temporary file in ``_delta_log`` already holding ``lines``
        (:func:`~compactor.lake.commit_files.stage`); the caller removes it. ``actions``:
        the lines' actions, when the caller has them (not parsed again); ``known``: the files
        of some of their add actions, by the path the action names (their statistics are not
        parsed).

        The commit protocol, under this follower's lock (itself taken under the run's commit
        lock):

        1. Advance to the latest version V, reading only the commit files written since the
           last look (a full read at start or when the table was replaced).
        2. Give up (the caller commits through delta-rs) when the table's protocol is one this
           writer does not implement (writer version above 2) or the log is not on a local disk.
        3. Run ``check`` against the positions at V and make sure every file to remove is live
           at V; a failure raises (:class:`Conflict` when another writer got there first).
        4. Write the actions to a temporary file in ``_delta_log``, sync it (or take the one
           the caller staged and synced) and hard-link it to ``<V+1>.json``
           (:func:`put_if_absent`, :func:`link`): of two writers of V+1 exactly one wins, and
           no reader sees a partial commit file. Having won, apply its own actions to the
           follower's state at V+1 (commits after it are read at the next look).
        5. Another writer won V+1: back to 1, at most ``_APPEND_ATTEMPTS`` times.
        6. When V+1 is a multiple of the checkpoint interval, once this lock is released,
           write the checkpoint and delete expired commit files, as delta-rs does after its
           own commits (:meth:`_checkpoint`; at once, or in a long-running mirror by
           :mod:`compactor.lake.checkpoints`' thread); its failure fails no commit. Temporary
           files a dead writer left are swept then.
        """
        if not is_local(self.uri):
            return None
        log_dir = join(local_path(self.uri), "_delta_log")
        with self._lock:
            for _ in range(_APPEND_ATTEMPTS):
                if not self._latest():
                    raise LakeError(f"lake log {self.uri} does not exist")
                if not self._plain:
                    return None
                check(self._txn)
                self._check_live(removed)
                version = self._version + 1
                try:
                    if not (link(log_dir, version, staged) if staged is not None
                            else put_if_absent(log_dir, version, lines)):
                        continue  # step 5: another writer took this version
                except OSError as exc:
                    raise LakeError(f"cannot write commit {version} of the Delta log "
                                    f"{self.uri}: {exc}") from exc
                try:  # our own commit, from what it holds: no read of the file back
                    for action in (actions if actions is not None
                                   else map(json.loads, lines)):
                        self._apply(action, known)
                    self._version = version
                except Overtaken:
                    self._base = None  # replaced just after our commit: reload at next look
                    return version
                due = version % self._checkpoint_interval == 0
                break
            else:
                raise LakeError(
                    f"{self.uri}: {_APPEND_ATTEMPTS} commits in a row lost the race for the "
                    "next version to another writer; stop the other 'compactor run' on this "
                    "lake and topic")
        if due:
            checkpoints.write(self.uri, lambda: self._checkpoint(version))
        return version

    def check_live(self, paths: Iterable[str]) -> None:
        """Raise :class:`~compactor.lake.commit_files.Conflict` when a path is not a live file
        of the log as of the last look (another commit removed it)."""
        with self._lock:
            self._check_live(paths)

    def _check_live(self, paths: Iterable[str]) -> None:
        gone = [p for p in paths if p not in self._where]
        if gone:
            raise Conflict(f"{self.uri}: {len(gone)} file(s) to remove are no longer in the "
                           f"log at version {self._version} (another commit removed them), "
                           f"e.g. {gone[0]}")

    def _checkpoint(self, version: int) -> None:
        """Write the checkpoint at ``version`` (step 6 of a commit): delta-rs opens the table there
        (our commit: the last checkpoint and the commits since), writes the checkpoint from it and
        deletes commit files past the log retention; that table becomes the follower's (step 1 of
        this module's protocol) unless a newer one already is. Then temporary commit files a
        dead writer left are swept."""
        try:
            table = self._storage.table(self.uri, version=version)
            table.create_checkpoint()
            table.cleanup_metadata()
        except Exception as exc:  # a missed checkpoint costs readers time, never data
            log.warning("checkpoint of %s at version %d failed (%s); the next one due "
                        "retries", self.uri, version, exc)
        else:
            with self._lock:  # unless it reloads at its next look or reloaded past it
                if self._base is not None and version > self.base_opened_at \
                        and not self._adopt(table):
                    self._base = None  # another table under the path: reload at next look
        try:
            stale = remove_stale_temporaries(join(local_path(self.uri), "_delta_log"),
                                             time.time())
        except OSError as exc:
            log.warning("could not sweep %s's _delta_log for stale temporary commit files "
                        "(%s); the next checkpoint retries", self.uri, exc)
        else:
            if stale:
                log.info("%s: removed %d temporary commit file(s) a writer left behind: %s",
                         self.uri, len(stale), ", ".join(stale))

    def _adopt(self, table: DeltaTable) -> bool:
        """Make ``table``, opened afresh, the follower's delta-rs table if it is the table
        followed (its Delta id); False when another table replaced it under the path."""
        if str(table.metadata().id) != self._table_id:
            return False
        self._base, self.base_opened_at = table, table.version()
        return True

    def _latest(self) -> bool:
        """Bring the follower to the latest version (steps 1, 2 and 4's start-over): load if
        needed or if the table was replaced, then read the commits since; False when the table
        does not exist."""
        if self._base is None and not self._load():
            return False
        try:
            self._advance()
        except Overtaken:
            if not self._load():
                return False
            self._advance()
        return True

    def position(self, app_id: str) -> int | None:
        """An app transaction's version as of the last :meth:`table_for_commit` or
        :meth:`view` (or newer): what a commit checks before it lands, without a delta-rs
        lookup per position in a snapshot of every file."""
        with self._lock:
            return self._txn(app_id)

    def _txn(self, app_id: str) -> int | None:
        """A position: from the commits read since the base snapshot, else looked up in it
        once (absent ones too: a delta-rs lookup walks a large log's snapshot)."""
        if app_id not in self._txns and self._base is not None and not self._all_txns:
            self._txns[app_id] = self._base.transaction_version(app_id)
        return self._txns.get(app_id)

    def _load(self) -> bool:
        """Load the table in full at its latest version (step 1); False when it does not exist."""
        table = open_table(self.uri, self._storage)
        if table is None:
            self._base = None
            return False
        actions = pa.table(table.get_add_actions(flatten=True))
        files = _files_from_actions(actions) if actions.num_rows else []
        self._base = table
        self._version = self.base_opened_at = table.version()
        self._table_id = str(table.metadata().id)
        self._plain = table.protocol().min_writer_version in _PLAIN_WRITER_VERSIONS
        self._configure(table.metadata().configuration)
        self._files, self._where, self._segments = {}, {}, {}
        found = app_transactions(table, self.uri, self._storage)
        self._txns, self._logs, self._all_txns = dict(found or {}), {}, found is not None
        self._rewrites = {}
        self._dirty, self._dirty_segments = set(), set()
        for f in files:
            self._add(f)
        self.full_loads += 1
        return True

    def _advance(self) -> None:
        """Apply the commit files written since the version known (step 2)."""
        while True:
            actions = read_commit(self.uri, self._storage, self._version + 1)
            if actions is None:
                self._overtaken(self._version)
                return
            for action in actions:
                self._apply(action)
            self._version += 1

    def _apply(self, action: dict[str, Any],
               known: Mapping[str, DataFile] | None = None) -> None:
        if "add" in action:
            mine = known.get(action["add"]["path"]) if known else None
            self._add(mine if mine is not None else file_from_add(action["add"]))
        elif "remove" in action:
            where = self._where.pop(unquote(action["remove"]["path"]), None)
            if where is not None:
                del self._files[where][unquote(action["remove"]["path"])]
                self._dirty_segments.add(where)
                self._dirty.add(where[0])
        elif "txn" in action:
            app_id, version = action["txn"]["appId"], int(action["txn"]["version"])
            self._txns[app_id] = version
            for position in (INGEST, CLEANER, REWRITE):
                partition = _partition_of(position.app_id, app_id)
                if partition is not None:
                    self._dirty.add(partition)
        elif "metaData" in action:
            if str(action["metaData"].get("id")) != self._table_id:
                raise Overtaken
            self._configure(action["metaData"].get("configuration") or {})
        elif "protocol" in action:
            self._plain = action["protocol"].get("minWriterVersion") in _PLAIN_WRITER_VERSIONS

    def _configure(self, configuration: Mapping[str, str]) -> None:
        interval = str(configuration.get("delta.checkpointInterval", "")).strip()
        self._checkpoint_interval = (int(interval) if interval.isdigit() and int(interval) > 0
                                     else _DEFAULT_CHECKPOINT_INTERVAL)

    def _add(self, f: DataFile) -> None:
        where = (f.partition, f.segment)
        self._files.setdefault(where, {})[f.path] = f
        self._where[f.path] = where
        self._dirty_segments.add(where)
        self._dirty.add(f.partition)

    def _rebuild(self) -> None:
        """Rebuild the logs of the partitions commits touched (step 3): only touched segments
        are sorted again; a partition's log is a tuple of its segments, so its cost grows with
        its segment count, not its files."""
        for partition, base in self._dirty_segments:
            members = self._files.get((partition, base))
            segments = self._segments.setdefault(partition, {})
            if members:
                segments[base] = Segment(partition, base, tuple(
                    sorted(members.values(), key=lambda f: f.first_offset)))
            else:
                segments.pop(base, None)
                self._files.pop((partition, base), None)
        for partition in self._dirty:
            by_base = self._segments.get(partition, {})
            self._logs[partition] = PartitionLog(
                partition=partition,
                segments=tuple(by_base[b] for b in sorted(by_base)),
                committed_offset=self._txn(INGEST.id(partition)),
                cleaner_offset=self._txn(CLEANER.id(partition)),
            )
            self._rewrites[partition] = self._txn(REWRITE.id(partition)) or 0
        self._dirty_segments.clear()
        self._dirty.clear()


@functools.lru_cache(maxsize=1 << 16)
def _partition_of(template: str, app_id: str) -> int | None:
    prefix = template.split("{", 1)[0]
    rest = app_id[len(prefix):] if app_id.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


_FOLLOWERS: dict[tuple[str, tuple[tuple[str, str], ...]], LogFollower] = {}
_FOLLOWERS_LOCK = threading.Lock()


def _key(uri: str, storage: Storage) -> tuple[str, tuple[tuple[str, str], ...]]:
    return uri.rstrip("/"), tuple(sorted(storage.options.items()))


def follow(uri: str, storage: Storage) -> LogFollower:
    """This process's follower of the log at ``uri`` (one per table, shared by its readers)."""
    key = _key(uri, storage)
    with _FOLLOWERS_LOCK:
        follower = _FOLLOWERS.get(key)
        if follower is None:
            follower = _FOLLOWERS[key] = LogFollower(uri, storage)
        return follower


def forget(uri: str, storage: Storage) -> None:
    """Drop this process's follower of ``uri``: a run starts from what is on disk now (the
    lake may have been restored or moved since an earlier run of this process)."""
    with _FOLLOWERS_LOCK:
        _FOLLOWERS.pop(_key(uri, storage), None)


def log_view(uri: str, storage: Storage, partitions: Iterable[int] = ()) -> LogView | None:
    """The latest version of the log at ``uri`` (see :meth:`LogFollower.view`); None when it
    does not exist yet."""
    return follow(uri, storage).view(partitions)
