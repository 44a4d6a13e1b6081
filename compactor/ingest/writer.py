"""The segment writer: appends consumed offset ranges to ``L/T/log``, exactly once.

Commit protocol of one micro-batch, per topic:

1. The driver reads one snapshot of ``L/T/log`` and ``L/T/rejected``: per partition the
   last committed offset (app transaction ``compactor-ingest-<partition>``, whose version is
   the last offset ingested) and the active segment.
2. Spark tasks (the engine's, for example ``streaming.consumer.write_ranges``, one per core
   for many partitions) consume each range from the first offset not yet committed, assign
   records to segments by the roll rules, and write Parquet files under
   ``partition=P/segment=S/`` (:mod:`compactor.ingest.appender`); null keys of a compacted
   topic go to files of ``rejected``. Tasks write files only; nothing is visible yet.
3. The driver checks every topic's writer generation and writes each topic's log commit
   ahead to a temporary file in its ``_delta_log``; it syncs those files at once (overlapping
   syncs share the file system's journal commits, where a sync per commit made the commits of
   many topics add up). Then the engine's last check before anything lands runs
   (``before_commit``: the topic ids the broker reported once the tasks had read, asked while
   the commits were staged, :mod:`compactor.ingest.incarnation`). Then, per topic, it
   commits the rejected files (if any) with the same per-partition app transactions in the
   rejected table, then all log files in one Delta commit whose app transactions move each
   partition's version to the last offset of its range (the staged file linked under the
   next version).

A batch replayed after a crash finds its offsets committed in step 1 and writes nothing; files
of a batch that died before step 3 are never referenced and are removed by vacuum. A second
writer of the same partitions is fenced: its commit carries the same app ids and either loses
the race for the next commit file or finds the versions moved under it. The log commit is
written as one commit file where the log is on a local disk (:mod:`compactor.lake.log_commit`),
so its cost does not grow with the number of live files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from deltalake import DeltaTable, Transaction

from compactor.config import CompactorConfig
from compactor.exceptions import DataLossError, LakeError
from compactor.formats import TopicFormat
from compactor.ingest.batch_stats import BatchStats
from compactor.lake import fencing, log_commit, operations
from compactor.lake.app_transactions import position_lookup
from compactor.lake.commit_files import sync_files
from compactor.lake.datafiles import WrittenFile, add_action
from compactor.lake.layout import (
    LOG_PARTITION_COLUMNS,
    LOG_SCHEMA,
    REJECTED_SCHEMA,
    ensure_rejected,
    ensure_table,
    topic_paths,
)
from compactor.lake.log_follower import LogView, follow, log_view
from compactor.lake.range_reader import WrittenTombstones
from compactor.lake.rejected import Rejections
from compactor.lake.segments import ActiveSegment
from compactor.lake.storage import Storage, failure
from compactor.lake.written_records import WrittenRecords
from compactor.positions import INGEST, WRITER

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionPlan:
    """Everything a task needs to append one range; built on the driver, pickled to tasks."""

    topic: str
    partition: int
    start: int
    end: int
    log_path: str
    rejected_path: str
    committed_offset: int | None
    rejected_offset: int | None
    active: ActiveSegment | None
    segment_bytes: int
    roll_ms: int
    compact: bool
    now_ms: int
    storage: Storage
    formats: TopicFormat = field(default_factory=TopicFormat)


@dataclass(frozen=True)
class RangeResult:
    topic: str
    partition: int
    last_offset: int  # the range's last offset: everything up to it is handled
    files: tuple[WrittenFile, ...] = field(default=())
    # The tombstones the log files hold, for the readers after the commit (they need not
    # decode the values again); None where the task kept none (another writer's task).
    tombstones: WrittenTombstones | None = None
    rejections: Rejections = field(default_factory=lambda: Rejections({}, None))
    # The records the task's ranges put in the log, for the next MERGE, carried by one of
    # its results (compactor.lake.written_records); None on the others.
    records: WrittenRecords | None = None


LogStarts = Callable[[list[tuple[str, int]]], Mapping[tuple[str, int], int]]


def _lake_start(config: CompactorConfig, topic: str, partition: int, start: int,
                committed: int | None, log_start: int) -> int:
    """Where a partition's range must start: the lake's position, not the query's.

    The lake is the record of what was mirrored. Spark's checkpoint can be ahead of it (a lake
    restored from an older copy, a topic's folder moved aside): the missing offsets are read
    again. Offsets the broker deleted before the lake had them are data loss.
    """
    if committed is not None:
        wanted = committed + 1
    elif config.starting_offsets == "earliest":
        wanted = log_start
    else:  # starting.offsets=latest: where the query started is where the lake starts
        wanted = start
    if wanted < log_start:
        held = f"holds offsets up to {committed}" if committed is not None else "holds none"
        message = (f"{topic}-{partition}: the lake {held}, but the broker's log now starts at "
                   f"offset {log_start}: offsets [{wanted}, {log_start}) were deleted from "
                   "Kafka before they were mirrored (retention, or a recreated topic)")
        if config.fail_on_data_loss:
            raise DataLossError(f"{message}. Set fail.on.data.loss=false to skip them.")
        log.warning("skipping lost data: %s", message)
        wanted = log_start
    if wanted < start:
        log.warning("%s-%d: the lake is behind the query's checkpoint (the lake's next offset "
                    "%d, the checkpoint's %d): reading offsets [%d, %d) again", topic,
                    partition, wanted, start, wanted, start)
    return wanted


class RejectedPositions:
    """Where each partition's rejected records stand, as one run's plans need them (the caller
    keeps one between batches).

    A run commits a batch's rejected records before its log records, so once it committed a
    batch of a partition (:meth:`planned`) the rejected position is never past the log's and
    need not be read again; a crash between the two commits ends the run. Before that, only
    this run (fenced) could move the position, so a topic's positions are read all at once at
    its first plan, not per partition as each first shows up. A failed batch may have moved
    some: :meth:`forget` makes the next plan read them again."""

    def __init__(self) -> None:
        self.caught_up: set[tuple[str, int]] = set()
        self._read: dict[str, Callable[[str], int | None]] = {}  # topic -> its positions

    def lookup(self, config: CompactorConfig, topic: str,
               partitions: Iterable[int]) -> Callable[[str], int | None] | None:
        """The positions of ``topic``'s rejected table (created on first use); None when
        every one of ``partitions`` is caught up."""
        if all((topic, p) in self.caught_up for p in partitions):
            return None
        if topic not in self._read:
            path = topic_paths(config.lake_path, topic).rejected
            self._read[topic] = position_lookup(
                ensure_rejected(path, storage=config.storage), path, config.storage)
        return self._read[topic]

    def planned(self, plans: Iterable[PartitionPlan]) -> None:
        """The plans' batch is committed: their partitions are caught up."""
        self.caught_up.update((p.topic, p.partition) for p in plans)

    def forget(self) -> None:
        """A batch failed: read the positions of partitions not caught up again."""
        self._read.clear()


def plan_ranges(
    config: CompactorConfig, ranges: Iterable[tuple[str, int, int, int]], now_ms: int,
    log_starts: LogStarts | None = None, rejected: RejectedPositions | None = None,
) -> list[PartitionPlan]:
    """Driver side, step 1: a plan per range with offsets to read, from one snapshot of each
    topic. Each plan starts at the lake's position (:func:`_lake_start`); ``log_starts`` gives
    the broker's first offset of partitions (one request for all; without it, the query's
    ranges are taken as they come); ``rejected``: what this run knows of the rejected
    positions (without it, they are read for this call)."""
    rejected = rejected if rejected is not None else RejectedPositions()
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for topic, partition, start, end in ranges:
        by_topic.setdefault(topic, []).append((partition, start, end))
    views = {topic: _log_view(config, topic, [p for p, _, _ in parts])
             for topic, parts in by_topic.items()}
    # The broker's log start of every partition that has offsets to read or no lake position.
    asked = [(t, p) for t, parts in by_topic.items() for p, start, end in parts
             if end > start or views[t].partitions[p].committed_offset is None]
    firsts = log_starts(asked) if log_starts is not None and asked else {}
    plans: list[PartitionPlan] = []
    for topic, parts in sorted(by_topic.items()):
        tc = config.topic(topic)
        paths = topic_paths(config.lake_path, topic)
        positions = rejected.lookup(config, topic, [p for p, _, _ in parts])
        logs = views[topic].partitions
        for partition, start, end in sorted(parts):
            plog = logs[partition]
            if (topic, partition) in firsts:
                start = _lake_start(config, topic, partition, start, plog.committed_offset,
                                    firsts[(topic, partition)])
            if start >= end or (plog.committed_offset is not None
                                and plog.committed_offset >= end - 1):
                continue  # nothing to read, or a replayed batch the lake already holds
            plans.append(PartitionPlan(
                topic=topic, partition=partition, start=start, end=end,
                log_path=paths.log, rejected_path=paths.rejected,
                committed_offset=plog.committed_offset,
                rejected_offset=(None if positions is None or (topic, partition) in
                                 rejected.caught_up else positions(INGEST.id(partition))),
                active=plog.writer_segment(tc.roll_ms, now_ms),
                segment_bytes=tc.segment_bytes, roll_ms=tc.roll_ms, compact=tc.compact,
                now_ms=now_ms, storage=config.storage, formats=config.format(topic),
            ))
    return plans


def _log_view(config: CompactorConfig, topic: str, partitions: list[int]) -> LogView:
    """The topic's log (created on its first batch) as of its newest commit."""
    path = topic_paths(config.lake_path, topic).log
    view = log_view(path, config.storage, partitions)
    if view is None:
        ensure_table(path, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=config.storage)
        view = log_view(path, config.storage, partitions)
    assert view is not None  # created just above
    return view


def _check_versions(path: str, versions: Mapping[int, int],
                    position: Callable[[int], int | None]) -> None:
    """Refuse offsets another writer already committed (``position``: a partition's ingest
    position in the snapshot the commit lands on)."""
    for partition, version in versions.items():
        current = position(partition)
        if current is not None and current >= version:
            raise LakeError(
                f"{path}: partition {partition} already holds offsets up to {current}, written "
                f"by another writer while this one wrote up to {version}; stop the other "
                "'compactor run' on this lake and topic (only one may mirror it)"
            )


def _summary(files: list[WrittenFile], versions: Mapping[int, int]) -> str:
    return (f"{sum(f.records for f in files)} records of partitions "
            f"{','.join(map(str, sorted(versions)))}")


def _commit_rejected(table: DeltaTable, path: str, files: list[WrittenFile],
                     versions: Mapping[int, int], now_ms: int) -> None:
    """Commit ``files`` to the rejected table (a snapshot opened for this commit)."""
    _check_versions(path, versions, lambda p: INGEST.read(table, p))
    txns = [INGEST.moved_to(v, p, now_ms=now_ms) for p, v in versions.items()]
    try:
        table.create_write_transaction(
            [add_action(f, now_ms) for f in files], "append", REJECTED_SCHEMA,
            commit_properties=operations.properties(
                operations.INGEST, _summary(files, versions), txns),
        )
    except Exception as exc:
        raise LakeError(_refused(path, exc)) from exc


def _commit_log(path: str, storage: Storage, files: list[WrittenFile],
                versions: Mapping[int, int], txns: list[Transaction], generation: int | None,
                now_ms: int, staged: log_commit.Staged | None) -> None:
    """Commit ``files`` to the log with its offsets (:mod:`compactor.lake.log_commit`): the
    writer generation and each partition's position are checked at the version it lands on."""
    def check(position: Callable[[str], int | None]) -> None:
        fencing.check_generation(path, generation, position(WRITER.id()))
        _check_versions(path, versions, lambda p: position(INGEST.id(p)))

    try:
        log_commit.append(follow(path, storage), files, txns, operations.INGEST,
                          _summary(files, versions), check, LOG_SCHEMA, LOG_PARTITION_COLUMNS,
                          now_ms, staged=staged)
    except LakeError:
        raise
    except Exception as exc:
        raise LakeError(_refused(path, exc)) from exc


def _refused(path: str, exc: Exception) -> str:
    return (f"commit to {path} failed: {failure(path, exc)}. If another 'compactor run' "
            "mirrors the same topic into this lake, stop one of them.")


def commit_ranges(config: CompactorConfig, results: list[RangeResult],
                  generations: Mapping[str, int] | None = None,
                  before_commit: Callable[[], None] | None = None) -> dict[str, BatchStats]:
    """Driver side, step 3: every topic checked and its log commit staged and synced, then
    ``before_commit`` called, then per topic its rejected files and its log commit.

    ``generations`` are this run's writer generations (:mod:`compactor.lake.fencing`); a topic
    another run claimed since raises FencedError before any topic is committed. An error
    ``before_commit`` raises (a recreated topic) commits nothing either.
    """
    now_ms = int(time.time() * 1000)
    by_topic: dict[str, list[RangeResult]] = {}
    for r in results:
        by_topic.setdefault(r.topic, []).append(r)
    commits: list[_TopicCommit] = []
    try:
        for topic in sorted(by_topic):
            commits.append(_prepare(config, topic, by_topic[topic],
                                    (generations or {}).get(topic), now_ms))
        staged = [c.staged.path for c in commits if c.staged is not None]
        try:
            sync_files(staged)
        except OSError as exc:
            raise LakeError(f"cannot sync the commits of {config.lake_path}: {exc}") from exc
        if before_commit is not None:
            before_commit()
        return {c.topic: _finish(config, c, now_ms) for c in commits}
    finally:
        for c in commits:
            if c.staged is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(c.staged.path)


@dataclass(frozen=True)
class _TopicCommit:
    """One topic's part of step 3, checked and staged."""

    topic: str
    results: list[RangeResult]
    generation: int | None
    log_files: list[WrittenFile]
    versions: dict[int, int]  # partition -> last offset of its range
    txns: list[Transaction]
    staged: log_commit.Staged | None


def _prepare(config: CompactorConfig, topic: str, mine: list[RangeResult],
             generation: int | None, now_ms: int) -> _TopicCommit:
    """Check the topic's writer generation and write its log commit ahead (not yet synced)."""
    paths = topic_paths(config.lake_path, topic)
    # The fencing check runs before anything is committed, and again, with the offsets,
    # at the version the log commit lands on (nothing of this process commits to the log
    # in between: the commit lock is held).
    follower = follow(paths.log, config.storage)
    follower.view()
    fencing.check_generation(paths.log, generation, follower.position(WRITER.id()))
    log_files = [f for r in mine for f in r.files if f.table == "log"]
    versions = {r.partition: r.last_offset for r in mine}
    txns = [INGEST.moved_to(v, p, now_ms=now_ms) for p, v in versions.items()]
    staged = log_commit.stage(follower, log_files, txns, operations.INGEST,
                              _summary(log_files, versions), LOG_PARTITION_COLUMNS, now_ms)
    return _TopicCommit(topic, mine, generation, log_files, versions, txns, staged)


def _finish(config: CompactorConfig, c: _TopicCommit, now_ms: int) -> BatchStats:
    """Commit the topic's rejected files, then its log commit; what the batch did to it."""
    paths = topic_paths(config.lake_path, c.topic)
    rejected = [f for r in c.results for f in r.files if f.table == "rejected"]
    if rejected:
        versions = {r.partition: r.last_offset for r in c.results
                    if any(f.table == "rejected" for f in r.files)}
        _commit_rejected(config.storage.table(paths.rejected), paths.rejected, rejected,
                         versions, now_ms)
    _commit_log(paths.log, config.storage, c.log_files, c.versions, c.txns, c.generation,
                now_ms, c.staged)
    return BatchStats(
        records=sum(f.records for f in c.log_files),
        record_bytes=sum(f.record_bytes for f in c.log_files),
        rejected=sum(f.records for f in rejected),
        files=len(c.log_files),
        partitions=len(c.results),
        next_offsets={r.partition: r.last_offset + 1 for r in c.results},
        rejections=Rejections.combined([r.rejections for r in c.results]),
        newest_ms=max((f.newest_ms for f in c.log_files if f.newest_ms is not None),
                      default=None),
    )
