"""Log maintenance on the driver: choose partitions, run cleaner tasks, commit, vacuum.

Commit protocol of one pass, per partition:

0. Run the tombstone readers (the erasure ledger, the downstream tables) over everything the
   log committed, under the commit lock, and take the offset every one of them has read
   (:mod:`compactor.erasure.tombstones`); a dry run skips this.
1. Plan from one snapshot of ``L/T/log``: the cleanable range (ending, at the latest, at the
   first segment holding an offset the readers have not read), the segments retention expires
   (wholly read ones only), the segments to consolidate (:mod:`compactor.cleaner.consolidation`),
   for a partition with an expired tombstone horizon how far the latest-value table merged (later
   tombstones stay), the cleaner checkpoint C (``compactor-cleaner-<partition>``) and the fence F
   (``compactor-rewrite-<partition>``).
2. Spark tasks (at most one per core, each cleaning several partitions) run
   :func:`compactor.cleaner.clean_partition`; it writes new files and returns the files to
   remove and add and the new checkpoint C'.
3. Under the commit lock (no other commit of this process touches the log meanwhile), the
   log's follower reads the commits since its last look and the commit is checked at the
   version it would land on: if the checkpoint is no longer C, the fence no longer F, a newer
   run claimed the log, or a file to remove is no longer live, another writer got there first
   and this pass's files are abandoned. Otherwise removes, adds, ``(compactor-cleaner-<p>,
   C')``, ``(compactor-rewrite-<p>, F + 1)`` and ``compactor-cleanable-<p>`` go in one Delta
   commit (consolidation's removes and adds with ``dataChange=false``), written as the next
   commit file only if no other writer created it first (:mod:`compactor.lake.log_commit`),
   so a double remove never lands.
4. The erasure ledger records, in one commit per topic, that the log finished the tombstones
   of each cleaned partition up to C' - 1 (done events a crash loses before this, the next
   run's reconcile writes from the checkpoints).
5. Vacuum deletes removed files past the grace period, and old orphans
   (:mod:`compactor.cleaner.topic_vacuum`; in a running service, of the topics due).

A partition whose task fails is marked uncleanable with its error and skipped by later passes
of this process (``compactor clean --force`` retries it); the others go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compactor.cleaner import uncleanable
from compactor.cleaner.allowance import AllowanceWatch
from compactor.cleaner.cleanable import (
    CleanableRange,
    active_segment,
    cleanable_range,
    cleaning_order,
)
from compactor.cleaner.consolidation import merge_runs
from compactor.cleaner.partition_cleaner import CleanPlan, CleanResult, clean_partition
from compactor.cleaner.retention import expired_segments
from compactor.cleaner.topic_vacuum import TopicVacuum
from compactor.config import CompactorConfig
from compactor.erasure.tombstones import Carried, TombstoneReaders
from compactor.exceptions import CompactorError
from compactor.lake import fencing, log_commit
from compactor.lake.commit_files import Conflict
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, open_table, topic_paths
from compactor.lake.log_follower import follow, log_view
from compactor.positions import CLEANER, REWRITE, TABLE, WRITER
from compactor.tasks import balanced_groups

log = logging.getLogger(__name__)


class _TableMerged:
    """How far ``L/T/table`` has merged each partition: a tombstone past that is kept.

    Read only for a partition holding a tombstone whose horizon has passed, and then once per
    topic and pass, so an ordinary pass does not open the table.
    """

    def __init__(self, config: CompactorConfig, topic: str) -> None:
        self._path = topic_paths(config.lake_path, topic).table
        self._storage = config.storage
        self._table: Any = None
        self._read = False

    def upto(self, partition: int) -> int | None:
        """None without a table (it will start from what the log holds then); -1 for a
        partition it has never merged."""
        if not self._read:
            self._table, self._read = open_table(self._path, self._storage), True
        if self._table is None:
            return None
        merged = TABLE.read(self._table, partition)
        return -1 if merged is None else merged


@dataclass(frozen=True)
class PartitionOutcome:
    topic: str
    partition: int
    range: CleanableRange
    result: CleanResult | None  # None: planned only (dry run) or not due
    committed: bool = False


@dataclass
class PassReport:
    """Everything one pass looked at and did."""

    outcomes: list[PartitionOutcome] = field(default_factory=list)
    vacuumed: int = 0
    seconds: float = 0.0

    @property
    def cleaned(self) -> list[PartitionOutcome]:
        return [o for o in self.outcomes if o.committed]


@dataclass
class CleaningTotals:
    """Running totals of what cleaning passes did."""

    passes: int = 0
    partitions_cleaned: int = 0
    records_dropped: int = 0
    bytes_rewritten: int = 0
    files_vacuumed: int = 0

    def add(self, report: PassReport) -> None:
        self.passes += 1
        self.partitions_cleaned += len(report.cleaned)
        self.files_vacuumed += report.vacuumed
        for outcome in report.cleaned:
            if outcome.result is not None:
                self.records_dropped += outcome.result.stats.records_dropped
                self.bytes_rewritten += outcome.result.stats.bytes_written


@dataclass(frozen=True)
class _Planned:
    plan: CleanPlan
    checkpoint: int | None
    fence: int  # the partition's REWRITE position when planned


class LogMaintenance:
    """Cleaning, retention and vacuum for every configured topic."""

    def __init__(self, spark: Any | None, config: CompactorConfig,
                 commit_lock: threading.Lock | None = None,
                 nothing_in_flight: Callable[[], bool] | None = None,
                 readers: TombstoneReaders | None = None, compaction: bool = True,
                 vacuum_when_due: bool = False) -> None:
        self._spark = spark
        self._config = config
        # False (log.cleaner.enable=false in a run): retention and vacuum only, as Kafka's
        # setting stops its cleaner, not its retention.
        self._compaction = compaction
        self._lock = commit_lock or threading.Lock()
        self.uncleanable: dict[tuple[str, int], str] = {}
        # The ledger and downstream tables: caught up before each pass, which then cleans
        # nothing they have not read (compactor.erasure.tombstones). The service shares the
        # mirror's.
        self._readers = readers or TombstoneReaders(config)
        self._ledger = self._readers.ledger
        self.vacuum = TopicVacuum(config, self._ledger, self._lock, nothing_in_flight)
        # A service's passes vacuum a topic when it is due; a pass on its own, every topic.
        self._vacuum_when_due = vacuum_when_due
        # This run's writer generation per topic (compactor.lake.fencing); empty: no fencing.
        self.generations: dict[str, int] = {}
        self.allowance = AllowanceWatch(config)

    def note_removed(self, topic: str, now_ms: int | None = None) -> None:
        """Files of ``topic`` were removed now: wake up to vacuum them once the grace passes."""
        self.vacuum.note_removed(topic, now_ms)

    def next_due_ms(self, now_ms: int | None = None,
                    topics: list[str] | None = None) -> int | None:
        """The earliest wall-clock time at which some work of ``topics`` (default: all) or a
        noted removal falls due, from the Delta log.

        The erasure deadline is planned backwards, so the service wakes at these instants
        rather than only every ``log.cleaner.backoff.ms``: an active segment's roll deadline,
        a dirty segment's forced-cleaning time, a tombstone horizon, a removed file's grace.
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        due = self.vacuum.wake_times(now)
        for topic in self._config.topics if topics is None else topics:
            tc = self._config.topic(topic)
            if not (tc.compact and self._compaction):
                continue
            view = log_view(topic_paths(self._config.lake_path, topic).log,
                            self._config.storage)
            if view is None:
                continue
            for plog in view.partitions.values():
                if tc.erasure_deadline:  # only a deadline makes a roll or a dirty age due
                    active = active_segment(plog, tc.roll_ms, now)
                    if active is not None:
                        due.append(active.roll_deadline_ms(tc.roll_ms) + 1)
                    rng = cleanable_range(plog, tc, now)
                    if rng.earliest_dirty_ms is not None:
                        due.append(rng.earliest_dirty_ms + tc.cleaning_lag_ms + 1)
                horizons = [s.min_delete_horizon_ms for s in plog.segments
                            if s.min_delete_horizon_ms is not None]
                if horizons:
                    due.append(min(horizons))
        future = [t for t in due if t > now]
        return min(future) if future else None

    def _carry_tombstones(self, topic: str) -> Carried | None:
        """Run the tombstone readers over what the log committed and take the offset each
        partition's slowest reader reached (steps 1-2 of :mod:`compactor.erasure.tombstones`);
        None when a reader failed as a whole (no cleaning of the topic this pass: what it has
        not read must stay)."""
        try:
            with self._lock:
                return self._readers.catch_up(topic)
        except CompactorError as exc:
            log.error("%s: not cleaned this pass, the tombstone readers failed: %s", topic, exc)
            return None

    def _mark_uncleanable(self, topic: str, partition: int, log_path: str, why: str) -> None:
        """Keep the partition out of later passes (until forced) and record it in the log."""
        self.uncleanable[(topic, partition)] = why
        log.error("%s-%d is uncleanable: %s", topic, partition, why)
        with self._lock:  # recorded in the log, for 'compactor status'
            table = self._config.storage.table(log_path)
            fencing.check(table, self.generations.get(topic))
            if not uncleanable.is_marked(table, partition):
                uncleanable.mark(table, partition, why)

    def _plans(self, topics: list[str], force: bool, now_ms: int,
               report: PassReport, dry_run: bool = False) -> list[_Planned]:
        planned: list[tuple[CleanableRange, _Planned]] = []
        cleaner = self._config.cleaner
        for topic in topics:
            tc = self._config.topic(topic)
            carried = None
            if not dry_run:
                carried = self._carry_tombstones(topic)
                if carried is None:
                    continue
                if carried.erased:  # rows deleted from downstream tables: vacuum them in time
                    self.note_removed(topic)
            read_upto = carried.read_upto if carried is not None else None
            view = log_view(topic_paths(self._config.lake_path, topic).log,
                            self._config.storage)
            if view is None:
                continue
            merged = _TableMerged(self._config, topic)
            for partition, plog in view.partitions.items():
                upto = None if read_upto is None else read_upto.get(partition, -1)
                rng = cleanable_range(plog, tc, now_ms, upto)
                if carried is not None and partition in carried.failed:
                    if (topic, partition) not in self.uncleanable or force:
                        self._mark_uncleanable(topic, partition, view.uri,
                                               carried.failed[partition])
                    report.outcomes.append(PartitionOutcome(topic, partition, rng, None))
                    continue
                expired = [s for s in expired_segments(plog, tc, now_ms)
                           if upto is None or s.last_offset <= upto]
                due = self._compaction and tc.compact and (
                    rng.eligible or (force and rng.cleanable_bytes > 0))
                skip = (topic, partition) in self.uncleanable and not force
                active = active_segment(plog, tc.roll_ms, now_ms)
                gone = {s.base_offset for s in expired}
                runs = [r for r in merge_runs(plog.segments, active)
                        if r.segment not in gone] if self._compaction else []
                if skip or not (due or expired or runs):
                    report.outcomes.append(PartitionOutcome(topic, partition, rng, None))
                    continue
                planned.append((rng, _Planned(CleanPlan(
                    topic=topic, partition=partition, log_path=view.uri, range=rng,
                    segments=tuple(s for s in plog.segments if s.base_offset in gone or (
                        s is not active and s.base_offset < rng.first_uncleanable_offset)),
                    expired=tuple(s.base_offset for s in expired),
                    compact=due, segment_bytes=tc.segment_bytes,
                    delete_retention_ms=tc.delete_retention_ms,
                    buffer_bytes=cleaner.dedupe_buffer_size // cleaner.threads,
                    load_factor=cleaner.io_buffer_load_factor,
                    io_max_bytes_per_second=cleaner.io_max_bytes_per_second, now_ms=now_ms,
                    storage=self._config.storage, merge=tuple(runs),
                    table_merged_upto=merged.upto(partition) if rng.tombstones_due else None,
                ), plog.cleaner_offset, view.rewrites.get(partition, 0))))
        order = {id(r): i for i, r in enumerate(cleaning_order([r for r, _ in planned]))}
        planned.sort(key=lambda item: order.get(id(item[0]), len(order)))
        return [p for _, p in planned]

    def run_pass(self, topics: list[str] | None = None, force: bool = False,
                 dry_run: bool = False, now_ms: int | None = None) -> PassReport:
        """Clean every due partition once (``force``: every partition with dirty data).

        ``now_ms`` is the cleaning time (default: the clock), which decides rolls, lags and
        tombstone horizons.
        """
        started = time.monotonic()
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        report = PassReport()
        chosen = topics or list(self._config.topics)
        planned = self._plans(chosen, force, now_ms, report, dry_run)
        if dry_run or not planned:
            report.outcomes.extend(PartitionOutcome(p.plan.topic, p.plan.partition,
                                                    p.plan.range, None) for p in planned)
        else:
            log.info("cleaning %d partitions, %.1f MB dirty: %s", len(planned),
                     sum(p.plan.range.cleanable_bytes for p in planned) / 1e6,
                     ", ".join(f"{p.plan.topic}-{p.plan.partition} (dirty ratio "
                               f"{p.plan.range.dirty_ratio:.2f}"
                               f"{', overdue' if p.plan.range.must_clean else ''})"
                               for p in planned))
            results = self._execute([p.plan for p in planned])
            done: dict[str, dict[int, tuple[int, int]]] = {}  # topic -> partition -> (upto, at)
            for item, result in zip(planned, results, strict=True):
                committed = self._commit(item, result, done)
                report.outcomes.append(PartitionOutcome(
                    result.topic, result.partition, item.plan.range, result, committed))
            for topic, parts in done.items():  # one ledger commit per topic, not per partition
                self._ledger.record_done(topic, "log", {p: o for p, (o, _) in parts.items()},
                                         at_ms={p: at for p, (_, at) in parts.items()})
        if not dry_run:
            for topic in chosen:
                if not self._vacuum_when_due or self.vacuum.is_due(topic, now_ms):
                    report.vacuumed += self.vacuum.run(topic, now_ms)
        report.seconds = time.monotonic() - started
        if not dry_run:
            self.allowance.check(chosen, report.seconds)
        return report

    def _execute(self, plans: list[CleanPlan]) -> list[CleanResult]:
        """Spark tasks of several partitions each, at most one per core, balanced by the
        bytes of their logs (a task per partition cost a Python worker round trip each);
        in this process when there is no Spark session. Results come back in plan order."""
        if self._spark is None:
            return [clean_partition(p) for p in plans]
        context = self._spark.sparkContext
        groups = balanced_groups([p.range.total_bytes for p in plans],
                                 max(1, context.defaultParallelism))
        done = (context.parallelize([[(i, plans[i]) for i in g] for g in groups], len(groups))
                .flatMap(lambda group: [(i, clean_partition(plan)) for i, plan in group])
                .collect())
        placed = dict(done)
        return [placed[i] for i in range(len(plans))]

    def run_until_idle(self, max_passes: int = 50) -> list[PassReport]:
        """Pass after pass while a pass still finds work (a full offset map ends a pass early)."""
        reports = []
        for _ in range(max_passes):
            report = self.run_pass()
            reports.append(report)
            if not report.cleaned:
                break
        return reports

    def _commit(self, item: _Planned, result: CleanResult,
                done: dict[str, dict[int, tuple[int, int]]]) -> bool:
        key = (result.topic, result.partition)
        if result.error is not None:
            self._mark_uncleanable(result.topic, result.partition, item.plan.log_path,
                                   result.error)
            return False
        self.uncleanable.pop(key, None)
        nothing = (not result.removed and not result.added and not result.merged_from
                   and result.checkpoint == item.checkpoint)
        path = item.plan.log_path
        follower = follow(path, self._config.storage)
        if nothing:
            follower.view()
            if uncleanable.marked_at(follower.position, result.partition) is None:
                return False
        now_ms = int(time.time() * 1000)
        generation = self.generations.get(result.topic)
        # The fence moves with every commit of a task: a segment rewrite moves no checkpoint,
        # and a stale plan would otherwise remove files twice. The clearing position rides
        # along always: the partition was cleaned now, whether or not it was marked.
        txns = [CLEANER.moved_to(result.checkpoint, result.partition, now_ms=now_ms),
                REWRITE.moved_to(item.fence + 1, result.partition, now_ms=now_ms),
                uncleanable.clearing(result.partition, now_ms)]

        def check(position: Callable[[str], int | None]) -> None:
            fencing.check_generation(path, generation, position(WRITER.id()))
            if (position(CLEANER.id(result.partition)) != item.checkpoint
                    or (position(REWRITE.id(result.partition)) or 0) != item.fence):
                raise Conflict(f"{path}: partition {result.partition}'s cleaner "
                                          "checkpoint or fence moved")

        operation, summary = result.operation()
        with self._lock:
            try:
                log_commit.append(
                    follower, result.added, txns, operation, summary, check, LOG_SCHEMA,
                    LOG_PARTITION_COLUMNS, now_ms,
                    removes=[(f, True) for f in result.removed]
                    + [(f, False) for f in result.merged_from],  # consolidation: no data change
                    moved=result.merged)
            except Conflict as exc:
                log.warning("%s-%d: another cleaner committed first; this pass is dropped (%s)",
                            *key, exc)
                return False
            except fencing.FencedError:
                raise
            except Exception as exc:
                log.warning("%s-%d: cleaning commit refused (%s); retried next pass", *key, exc)
                return False
        if result.removed or result.merged_from:
            self.note_removed(result.topic, now_ms)
        if result.stats.tombstones_stamped or result.stats.records_dropped:
            done.setdefault(result.topic, {})[result.partition] = (
                result.checkpoint - 1, int(time.time() * 1000))
        s = result.stats
        log.info("cleaned %s-%d: checkpoint %d, %d records dropped, %d tombstones stamped, "
                 "%d tombstones gone, %d files merged into %d, %d files (%d bytes) written in "
                 "%.2fs", *key, result.checkpoint, s.records_dropped, s.tombstones_stamped,
                 s.tombstones_dropped, s.files_merged, len(result.merged),
                 len(result.added) + len(result.merged), s.bytes_written, s.seconds)
        return True
