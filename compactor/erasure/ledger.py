"""The erasure ledger ``L/T/erasures``: every tombstone, its deadline, and when each target
finished erasing it. Append-only; what is pending is derived, never stored.

Rows are events:

- ``tombstone``: partition, offset, the tombstone's timestamp, its deadline (timestamp +
  ``max.compaction.lag.ms``, null without one) and ``keyDigest``, the first 16 bytes of
  SHA-256(salt + key). The key itself is never written; the salt is the log table's Delta id,
  so an operator holding a key can find its rows, and nobody can read keys off the ledger.
- ``done``: a target (``table``, ``log``, ``downstream:<name>``) has finished every tombstone
  of a partition up to an offset, at ``atMs``. ``log`` means the cleaner's commit dropped the
  superseded values from the log; vacuum deletes their files within ``vacuum.grace.ms``.
- ``reconciled``: the topic erased a key whose tombstone the mirror never read (Kafka's
  cleaner removed it while the mirror was away, :mod:`compactor.erasure.reconcile`); its
  values in the partition below ``offset`` + 1 are being dropped by name from every target,
  at ``atMs``; ``deadlineMs`` is ``atMs`` + ``max.compaction.lag.ms``, for vacuum. Not part of
  the backlog (the step does every target at once); the audit reads it.

Append-only but for its retention: erasures every target finished longer than
``erasure.ledger.retention.ms`` ago leave it (:mod:`compactor.erasure.ledger_retention`).

Commit protocol of :meth:`ErasureLedger.record_tombstones`: read the ledger's app
transactions ``compactor-ledger-<partition>`` (the last log offset scanned, S) and the log's
committed offsets (L); append the tombstones with S < offset <= L and move S to L in the same
commit. Done events are appended by the step that finished the work, after its own commit; a
crash in between loses a done event, never an erasure (the work itself is recorded by that
target's own app transaction).
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from compactor.config import CompactorConfig
from compactor.erasure.backlog import Backlog, BacklogFollower
from compactor.erasure.ledger_retention import LedgerRetention
from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.commit_files import is_newest
from compactor.lake.layout import LOG_HYGIENE, ensure_table, open_table, read_table, topic_paths
from compactor.lake.log_follower import LogView, log_view
from compactor.lake.range_reader import TOMBSTONE_COLUMNS, WrittenTombstones, read_tombstones
from compactor.lake.small_files import compact_small_files
from compactor.positions import CLEANER, ERASE, LEDGER, TABLE, Position

log = logging.getLogger(__name__)

LEDGER_SCHEMA = pa.schema([
    ("event", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("keyDigest", pa.binary()), ("tombstoneTimeMs", pa.int64()), ("deadlineMs", pa.int64()),
    ("target", pa.string()), ("atMs", pa.int64()),
])
# A ledger gains a small file with each micro-batch that carries tombstones and with each
# done event. Past this many small files the maintenance pass rewrites them as one (events
# unchanged), so reading the ledger, which every micro-batch does, stays flat as a run ages.
COMPACT_AT_FILES = 64
# Files past this size are left as they are: a compaction rewrites the small files and at most one
# file short of this size, however long the mirror has run. Without the bound it rewrote the whole
# ledger, up to delta-rs's 100 MB target, under the commit lock each time (``python
# bench/ledger_compaction.py``).
COMPACT_TARGET_BYTES = 8 * 1024 * 1024
LEDGER_PROPERTIES = {
    "delta.dataSkippingStatsColumns": "event,partition,offset,deadlineMs,atMs",
    "delta.enableChangeDataFeed": "false",
    **LOG_HYGIENE,
}


def key_digest(salt: bytes, key: bytes) -> bytes:
    return hashlib.sha256(salt + key).digest()[:16]


@dataclass(frozen=True)
class Erasure:
    """One tombstone and when every target had finished erasing what it supersedes."""

    partition: int
    offset: int
    tombstone_ms: int
    deadline_ms: int | None
    done_ms: int | None  # None while some target has not finished

    def late(self, now_ms: int) -> bool:
        """Past its deadline: finished after it, or still pending after it."""
        if self.deadline_ms is None:
            return False
        return (self.done_ms if self.done_ms is not None else now_ms) > self.deadline_ms


def _rows(event: str, n: int, **columns: object) -> pa.Table:
    data = {name: columns.get(name, [None] * n) for name in LEDGER_SCHEMA.names}
    data["event"] = [event] * n
    return pa.table(data, schema=LEDGER_SCHEMA)


class DoneIndex:
    """When a target first finished an offset: the earliest ``at`` of its done events whose
    ``upto`` covers it. Sorted once, then a binary search per tombstone, so reading a ledger
    of T tombstones and D done events costs O((T + D) log D), not O(T * D)."""

    def __init__(self, done: list[tuple[int, int]]) -> None:
        ordered = sorted(done)
        self._upto = [u for u, _ in ordered]
        self._earliest: list[int] = [0] * len(ordered)  # min ``at`` over this event and later
        running: int | None = None
        for i in range(len(ordered) - 1, -1, -1):
            at = ordered[i][1]
            running = at if running is None else min(running, at)
            self._earliest[i] = running

    def first_done_at(self, offset: int) -> int | None:
        i = bisect.bisect_left(self._upto, offset)
        return self._earliest[i] if i < len(self._upto) else None


def _finished(events: list[dict[str, Any]]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(target, partition) -> [(done up to offset, at ms)], from the ledger's events."""
    finished: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for e in events:
        if e["event"] == "done":
            finished.setdefault((e["target"], e["partition"]), []).append(
                (e["offset"], e["atMs"]))
    return finished


class ErasureLedger:
    """Appends to and reads ``L/T/erasures`` for the configured topics."""

    def __init__(self, config: CompactorConfig) -> None:
        self._config = config
        # topic -> partition -> the last log offset whose tombstones this process recorded
        self._scanned: dict[str, dict[int, int]] = {}
        # topic -> a ledger version at which no recorded position was past ``_scanned``'s:
        # while the ledger stays there, a partition's position need not be looked up.
        self._trusted_at: dict[str, int] = {}
        # (topic, partition) -> why its tombstones could not be read at the last scan
        self.failed: dict[tuple[str, int], str] = {}
        self._backlogs: dict[str, BacklogFollower] = {}
        self._retention = LedgerRetention(config.storage)

    def _path(self, topic: str) -> str:
        return f"{topic_paths(self._config.lake_path, topic).root}/erasures"

    def path(self, topic: str) -> str:
        """Where the topic's ledger lives (``L/T/erasures``)."""
        return self._path(topic)

    def compact(self, topic: str) -> int:
        """Rewrite the ledger's small files as files of up to ``COMPACT_TARGET_BYTES`` once it
        holds ``COMPACT_AT_FILES`` files under half that size (:mod:`compactor.lake.small_files`);
        returns how many it replaced. No event changes, so it commits beside concurrent appends;
        vacuum deletes the replaced files after the grace, as any of our tables'. The caller
        holds the commit lock, so the rewrite is bounded in bytes."""
        table = open_table(self._path(topic), self._config.storage)
        if table is None:
            return 0
        try:
            return compact_small_files(
                table, COMPACT_TARGET_BYTES, COMPACT_AT_FILES, operations.COMPACT_LEDGER,
                f"erasure ledger of {topic}: small files rewritten as few")
        except Exception as exc:  # the ledger only reads slower until the next pass
            log.warning("%s: cannot compact the erasure ledger: %s", self._path(topic), exc)
            return 0

    def prune(self, topic: str, now_ms: int | None = None) -> int:
        """Remove the erasures every target finished longer than ``erasure.ledger.retention.ms``
        ago (:mod:`compactor.erasure.ledger_retention`); returns how many left. The caller
        holds the commit lock."""
        return self._retention.prune(topic, self._path(topic), self.targets(topic),
                                     self._config.topic(topic).erasure_ledger_retention_ms,
                                     now_ms)

    def record_tombstones(self, topic: str, view: LogView | None = None,
                          written: Mapping[int, WrittenTombstones] | None = None) -> int:
        """Append the tombstones the log committed since the last scan; returns how many.
        ``view``: the version of the log to read, when the caller has one; ``written``: see
        :meth:`TombstoneReaders.catch_up`."""
        if view is None:
            view = log_view(topic_paths(self._config.lake_path, topic).log,
                           self._config.storage)
        if view is None:
            return 0
        # The ledger is opened only when a position must be looked up or tombstones written.
        trusted_at = self._trusted_at.get(topic)
        ledger: DeltaTable | None = None
        if trusted_at is not None and is_newest(self._path(topic), self._config.storage,
                                                   trusted_at):
            version = trusted_at  # no commit since: the positions are where this process saw
        else:
            ledger = self._open(topic)
            version = ledger.version()
        trusted = trusted_at == version
        salt = view.table_id.encode()
        tc = self._config.topic(topic)
        now = int(time.time() * 1000)
        deadline = tc.erasure_deadline_ms
        # Arrow columns per partition, not a Python object per tombstone: a first scan of a
        # long log can find millions (16-byte digests, about 60 bytes a row in all).
        found: list[pa.Table] = []
        moved: dict[int, int] = {}
        scanned = self._scanned.setdefault(topic, {})
        for partition, plog in view.partitions.items():
            hi = plog.committed_offset
            known = scanned.get(partition)
            if hi is None or (known is not None and hi <= known):
                continue  # nothing committed since this process's last scan: no lookup
            # Only another process's scan moves a position past ours, and it commits.
            done = None
            if not trusted or known is None:
                ledger = ledger or self._open(topic, version)
                if ledger is None:
                    return self._look_again(topic, view, written)
                done = LEDGER.read(ledger, partition)
            lo = max(-1 if done is None else done, -1 if known is None else known)
            scanned[partition] = lo
            if hi <= lo:
                continue
            try:
                rows = read_tombstones(view.uri, plog, lo, hi, TOMBSTONE_COLUMNS,
                                       self._config.storage, (written or {}).get(partition))
            except LakeError as exc:  # this partition waits; the others go on
                self.failed[(topic, partition)] = str(exc)
                continue
            self.failed.pop((topic, partition), None)
            moved[partition] = hi
            if not rows.num_rows:
                continue
            n = rows.num_rows
            stamps = pc.divide(rows.column("timestamp").cast(pa.int64()), 1000)
            found.append(_rows(
                "tombstone", n, partition=pa.array([partition] * n, pa.int32()),
                offset=rows.column("offset").cast(pa.int64()),
                keyDigest=pa.array([key_digest(salt, k) for k in
                                    rows.column("key").to_pylist()], pa.binary()),
                tombstoneTimeMs=stamps,
                deadlineMs=(pc.add(stamps, deadline) if deadline is not None
                            else pa.nulls(n, pa.int64())),
                atMs=pa.array([now] * n, pa.int64())))
        # Partitions not looked up had no new log offsets, so no scan could move them.
        self._trusted_at[topic] = version
        if not found:
            scanned.update(moved)
            return 0
        ledger = ledger or self._open(topic, version)
        if ledger is None:
            return self._look_again(topic, view, written)
        table = pa.concat_tables(found)
        txns = [LEDGER.moved_to(hi, p) for p, hi in moved.items()]
        try:  # against the version whose app transactions gave S: a concurrent move fails it
            write_deltalake(ledger, table, mode="append",
                            commit_properties=operations.properties(
                                operations.RECORD_ERASURES,
                                f"{table.num_rows} tombstones of {topic} recorded", txns))
        except CommitFailedError:  # another process (compactor clean) recorded them first
            log.info("%s: the ledger moved concurrently; rescanning from its position", topic)
            self._trusted_at.pop(topic, None)
            return 0
        except Exception as exc:
            raise LakeError(f"cannot append to the erasure ledger {self._path(topic)}: "
                            f"{exc}") from exc
        scanned.update(moved)
        if ledger.version() == version + 1:  # nothing else landed between
            self._trusted_at[topic] = version + 1
        return int(table.num_rows)

    @overload
    def _open(self, topic: str) -> DeltaTable: ...

    @overload
    def _open(self, topic: str, version: int) -> DeltaTable | None: ...

    def _open(self, topic: str, version: int | None = None) -> DeltaTable | None:
        """The topic's ledger (created when absent); None when it is not at ``version``."""
        ledger = ensure_table(self._path(topic), LEDGER_SCHEMA, None, LEDGER_PROPERTIES,
                              storage=self._config.storage)
        return ledger if version is None or ledger.version() == version else None

    def _look_again(self, topic: str, view: LogView,
                    written: Mapping[int, WrittenTombstones] | None) -> int:
        """The ledger moved since this scan looked: scan again, every position looked up."""
        self._trusted_at.pop(topic, None)
        return self.record_tombstones(topic, view, written)

    def record_reconciled(self, topic: str, salt: bytes, partition: int, upto: int,
                          keys: pa.Array, at_ms: int) -> None:
        """Record that ``keys`` were erased by the topic in ``partition`` up to offset ``upto``
        without a tombstone the mirror read (a ``reconciled`` event per key)."""
        if len(keys) == 0:
            return
        ledger = ensure_table(self._path(topic), LEDGER_SCHEMA, None, LEDGER_PROPERTIES,
                              storage=self._config.storage)
        n = len(keys)
        deadline = self._config.topic(topic).erasure_deadline_ms
        table = _rows("reconciled", n, partition=pa.array([partition] * n, pa.int32()),
                      offset=pa.array([upto] * n, pa.int64()),
                      keyDigest=pa.array([key_digest(salt, k) for k in keys.to_pylist()],
                                         pa.binary()),
                      tombstoneTimeMs=pa.array([at_ms] * n, pa.int64()),
                      deadlineMs=pa.array([None if deadline is None else at_ms + deadline] * n,
                                          pa.int64()),
                      target=["source"] * n, atMs=pa.array([at_ms] * n, pa.int64()))
        try:
            write_deltalake(ledger, table, mode="append",
                            commit_properties=operations.properties(
                                operations.RECORD_ERASURES,
                                f"{n} keys of {topic}-{partition} the topic erased unseen"))
        except Exception as exc:
            raise LakeError(f"cannot append to the erasure ledger {self._path(topic)}: "
                            f"{exc}") from exc

    def reconciled(self, topic: str, salt: bytes | None = None,
                   key: bytes | None = None) -> list[dict[str, Any]]:
        """The ledger's ``reconciled`` events (of one key, given the log's id as ``salt``)."""
        table = open_table(self._path(topic), self._config.storage)
        if table is None:
            return []
        wanted = pc.field("event") == "reconciled"
        if key is not None and salt is not None:
            wanted &= pc.field("keyDigest") == pa.scalar(key_digest(salt, key), pa.binary())
        return list(table.to_pyarrow_dataset().to_table(filter=wanted).to_pylist())

    def read_upto(self, topic: str) -> dict[int, int]:
        """Per partition, the last log offset whose tombstones this ledger has recorded (as
        far as this process knows: the last :meth:`record_tombstones` call)."""
        return dict(self._scanned.get(topic, {}))

    def record_done(self, topic: str, target: str, upto: Mapping[int, int],
                    now_ms: int | None = None, at_ms: Mapping[int, int] | None = None) -> None:
        """``target`` finished every tombstone of each partition up to the given offset, at
        ``at_ms`` of the partition (default ``now_ms``, default the clock)."""
        if not upto:
            return
        ledger = open_table(self._path(topic), self._config.storage)
        if ledger is None:
            return
        now = int(time.time() * 1000) if now_ms is None else now_ms
        table = _rows("done", len(upto), partition=list(upto), offset=list(upto.values()),
                      target=[target] * len(upto),
                      atMs=[(at_ms or {}).get(p, now) for p in upto])
        # Through the table just opened: by path, delta-rs would open it a second time. Not
        # through a table kept open between calls: with deltalake 1.6.6, appends through one
        # object slow down with its age (``python bench/delta_appends.py``).
        write_deltalake(ledger, table, mode="append", commit_properties=operations.properties(
            operations.RECORD_ERASURES, f"{target} finished the tombstones of partitions "
            + ", ".join(f"{p} up to offset {o}" for p, o in sorted(upto.items()))))

    def reconcile(self, topic: str, now_ms: int | None = None) -> dict[str, dict[int, int]]:
        """Write the done events a crash lost, from each target's own committed progress.

        A kill between a target's commit and its done event leaves the erasure looking
        pending although the work is committed: the log's cleaner checkpoint
        (``compactor-cleaner-<p>``), the table's ``compactor-table-<p>`` and each downstream
        table's ``compactor-erase-<topic>-<p>`` say how far each really is. Called when the
        service starts; the events carry the time of the repair, so the ledger may overstate
        a latency, never understate it. Returns what it recorded.
        """
        state = self._follower(topic).state()
        pending = state.pending_offsets() if state is not None else {}
        if state is None or not pending:
            return {}
        paths = topic_paths(self._config.lake_path, topic)
        # target -> (table, position, offset shift)
        sources: dict[str, tuple[str, Position, int]] = {
            "log": (paths.log, CLEANER, -1),  # the checkpoint is the first dirty offset
            "table": (paths.table, TABLE, 0),
        }
        for d in self._config.downstream:
            if d.topic == topic:
                sources[f"downstream:{d.name}"] = (d.path, ERASE, 0)
        recorded: dict[str, dict[int, int]] = {}
        for target, (path, position, shift) in sources.items():
            table = open_table(path, self._config.storage)
            if table is None:
                continue
            upto: dict[int, int] = {}
            for partition, offsets in sorted(pending.items()):
                version = position.read(table, partition, topic)
                if version is None:
                    continue
                done = version + shift
                known = state.through(target, partition)
                # a pending erasure in (known, done]: offsets are sorted
                if done > known and bisect.bisect_right(offsets, done) > bisect.bisect_right(
                        offsets, known):
                    upto[partition] = done
            if upto:
                self.record_done(topic, target, upto, now_ms)
                recorded[target] = upto
        return recorded

    def targets(self, topic: str) -> list[str]:
        return ["log", "table"] + [f"downstream:{d.name}" for d in self._config.downstream
                                   if d.topic == topic]

    def _events(self, topic: str) -> list[dict[str, Any]]:
        table = open_table(self._path(topic), self._config.storage)
        return read_table(table).to_pylist() if table is not None else []

    def erasures(self, topic: str) -> list[Erasure]:
        """Every tombstone in the ledger with when its last target finished (None: pending)."""
        events = self._events(topic)
        return self._erasures(topic, events, _finished(events))

    def _erasures(self, topic: str, events: list[dict[str, Any]],
                  finished: dict[tuple[str, int], list[tuple[int, int]]]) -> list[Erasure]:
        out = []
        targets = self.targets(topic)
        index = {key: DoneIndex(done) for key, done in finished.items()}
        nothing = DoneIndex([])
        for e in events:
            if e["event"] != "tombstone":
                continue
            ends = [index.get((target, e["partition"]), nothing).first_done_at(e["offset"])
                    for target in targets]
            done = None if None in ends else max(t for t in ends if t is not None)
            out.append(Erasure(e["partition"], e["offset"], e["tombstoneTimeMs"],
                               e["deadlineMs"], done))
        return out

    def backlog(self, topic: str, now_ms: int | None = None) -> Backlog:
        """Tombstones some target has not finished, from the ledger's events alone. The
        first call per topic reads the whole ledger; later ones only its new commits
        (:mod:`compactor.erasure.backlog`), so keep one ledger object for repeated calls."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return self._follower(topic).backlog(now)

    def _follower(self, topic: str) -> BacklogFollower:
        follower = self._backlogs.get(topic)
        if follower is None:
            follower = self._backlogs[topic] = BacklogFollower(
                self._path(topic), self._config.storage, self.targets(topic))
        return follower
