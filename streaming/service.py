"""The long-running service behind ``compactor run``: the mirror query plus log maintenance.

The mirror's micro-batches and the cleaner's passes share one commit lock, so no two commits
of this process to the same log overlap. The cleaner looks at every topic every
``log.cleaner.backoff.ms`` and when a deadline falls due, also when no new data arrives
(deadlines are kept by the wall clock), and right after each micro-batch commit at the topics
it wrote (:mod:`compactor.cleaner.schedule`). With ``--once``, the mirror catches up and
then passes run until nothing is due. ``log.cleaner.enable=false`` leaves retention and
vacuum in the passes and takes compaction out, as the setting does in Kafka.

Stop protocol (Ctrl-C or SIGTERM):

1. The signal handler only sets a flag; nothing is interrupted.
2. The main loop waits until no micro-batch is between its first file write and its Delta
   commit and no cleaning pass is running, then stops the query.
3. A batch Spark had planned but not started is replayed by the next run from the checkpoint.

A kill -9 at any moment is also safe (see :mod:`compactor.ingest.writer` and
:mod:`compactor.cleaner.maintenance`); the flag only avoids leaving uncommitted files behind.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

from compactor.cleaner.maintenance import LogMaintenance, PassReport
from compactor.cleaner.schedule import PassSchedule
from compactor.config import CompactorConfig, resolve_config
from compactor.config.follow import refresh_topic_configs
from compactor.erasure.downstream import check_downstream
from compactor.erasure.source_gap import SourceGap
from compactor.exceptions import CompactorError
from compactor.ingest.batch_stats import BatchStats
from compactor.ingest.consumer_group import GroupCommitter
from compactor.ingest.incarnation import Incarnations
from compactor.lake import checkpoints, fencing
from compactor.lake.layout import topic_paths
from compactor.lake.log_follower import forget
from compactor.lake.missing_files import check_tables
from compactor.ops.engine import RunSummary
from compactor.ops.health import check_port
from compactor.ops.history import History
from compactor.ops.native_heap import NativeHeapTrimmer
from compactor.ops.progress import IngestProgress, log_pass_end
from compactor.ops.status import BrokerEnds
from streaming.catalog import register_tables
from streaming.restarts import Restarts
from streaming.stop_signals import StopSignals

log = logging.getLogger(__name__)


class Service:
    """Owns the Spark session, the mirror and the maintenance of one configuration.

    The ``spark`` engine of :mod:`compactor.ops.engine` (the ``compactor.engines`` entry point).
    """

    def __init__(self, config: CompactorConfig) -> None:
        self.config = resolve_config(config)
        check_downstream(self.config)
        if self.config.metrics_port:
            check_port(self.config.metrics_port)
        for topic in self.config.topics:
            warning = self.config.topic(topic).deadline_warning
            if warning:
                log.warning("%s", warning)
        self._signals = StopSignals()
        self._stop = self._signals.requested
        self._passes = PassSchedule(math.inf)  # the loop sets when every topic is due
        self.commit_lock = threading.Lock()
        self.native_heap = NativeHeapTrimmer()

    def request_stop(self, signum: int | None = None, _frame: FrameType | None = None) -> None:
        """Stop after the current commit; a second signal stops at once (exit 130)."""
        self._signals.request(signum, _frame)

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)

    def run(
        self, once: bool = False,
        on_batch: Callable[[int, Mapping[str, BatchStats]], None] | None = None,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> RunSummary:
        """Mirror and maintain until stopped (``once``: until everything due now is done)."""
        started = time.monotonic()
        run = self._start(on_batch, on_pass)
        checkpoints.start()  # off the micro-batch's commits: written while the next is read
        restarts = Restarts()
        query = restarts.start(run.mirror, once)
        if run.metrics is not None:
            run.metrics.alive = lambda: bool(query.isActive)
        self._recover(run.mirror)
        register_tables(run.mirror.spark, self.config)  # the table exists once recovered
        log.info("mirroring %s from %s into %s", ",".join(self.config.topics),
                 self.config.bootstrap_servers, self.config.lake_path)
        try:
            while True:
                self._loop(run, query, once)
                failure: Any = query.exception()
                if failure is None or self._stop.is_set() or not restarts.allow(
                        run.mirror, failure):
                    break
                query = restarts.start(run.mirror, once)
            if failure is not None:
                raise run.mirror.error(failure)
            if once and not self._stop.is_set():
                run.mirror.merge_tables(force=True)
                run.check_source()
                run.clean(until_idle=True)
                run.mirror.merge_tables(force=True)  # rows whose records retention removed
            elif self._stop.is_set():  # a clean stop leaves every table at its log
                run.mirror.merge_tables(force=True)
        except CompactorError:
            raise
        except Exception as exc:
            raise run.mirror.error(exc) from exc
        finally:
            if query.isActive:
                query.stop()
            run.mirror.settle()
            checkpoints.stop()
            run.history.flush()
            if run.group is not None:
                run.group.close()
            if run.mirror.incarnations is not None:
                run.mirror.incarnations.close()
        run.summary.seconds = time.monotonic() - started
        return run.summary

    def _start(
        self, on_batch: Callable[[int, Mapping[str, BatchStats]], None] | None,
        on_pass: Callable[[PassReport], None] | None,
    ) -> _Run:
        """Wire the session, the mirror, the cleaner, fencing, metrics and progress (step 1)."""
        from streaming.query import Mirror
        from streaming.session import build_session

        self.native_heap.start(os.environ)  # before the session's threads allocate
        spark = build_session(self.config.spark)
        mirror = Mirror(spark, self.config, self.commit_lock)
        mirror.listeners.append(lambda _id, stats: self._passes.on_batch(stats))
        if on_batch is not None:
            mirror.listeners.append(on_batch)
        cleaner = LogMaintenance(spark, self.config, self.commit_lock,
                                 nothing_in_flight=lambda: not mirror.in_batch,
                                 readers=mirror.readers, compaction=self.config.cleaner.enable,
                                 vacuum_when_due=True)
        tables = []
        for topic in self.config.topics:
            paths = topic_paths(self.config.lake_path, topic)
            forget(paths.log, self.config.storage)
            tables += [paths.log, paths.table, paths.rejected]
        check_tables(tables, self.config.storage)
        generations = {t: fencing.claim(
            topic_paths(self.config.lake_path, t).log, self.config.storage)
                       for t in self.config.topics}
        mirror.generations.update(generations)
        cleaner.generations.update(generations)
        mirror.incarnations = Incarnations(self.config)
        try:
            mirror.incarnations.claim()  # a recreated topic stops the run here
        except BaseException:
            mirror.incarnations.close()
            raise
        gap = SourceGap(self.config, self.commit_lock, mirror.readers.ledger,
                        mirror.readers.eraser, generations)
        gap.start()  # before the mirror's first commit: a new lake is caught up now
        gap.listeners.append(lambda done: cleaner.note_removed(done.topic))  # wake to vacuum
        log.info("writer generation %s", ", ".join(f"{t}={g}" for t, g in generations.items()))
        metrics = None
        if self.config.metrics_port:
            from compactor.ops.metrics import Metrics

            metrics = Metrics(self.config, self.config.metrics_port, mirror.ledger)
            mirror.listeners.append(metrics.on_batch)
            mirror.timings.append(metrics.on_timing)
            gap.listeners.append(metrics.on_reconcile)
            log.info("metrics on http://0.0.0.0:%d/metrics (and /healthz, /readyz)",
                     self.config.metrics_port)
        mirror.table_hooks.append(cleaner.note_removed)
        history = History(self.config)
        mirror.listeners.append(history.on_batch)
        progress = IngestProgress(BrokerEnds(self.config))
        mirror.listeners.append(progress.on_batch)
        group = None
        if self.config.commit_offsets:
            group = GroupCommitter(self.config)
            mirror.listeners.append(group.on_batch)
            log.info("committing the mirrored offsets to consumer group %s (for lag tools)",
                     group.group_id)
        return _Run(self.config, mirror, cleaner, metrics, on_pass,
                    RunSummary(ingest=mirror.totals), gap, history, group)

    def _recover(self, mirror: Any) -> None:
        """Repair what a crash left behind: a table behind its log, lost done events (step 2)."""
        mirror.merge_tables(force=True)
        for topic in self.config.topics:
            for target, upto in mirror.ledger.reconcile(topic).items():
                log.info("erasure ledger of %s: %s had finished up to %s before a crash",
                         topic, target, upto)

    def _loop(self, run: _Run, query: Any, once: bool) -> None:
        """Until stopped, run the tombstone readers over each micro-batch's commits once it
        returns, clean after each batch the topics it wrote and every topic when a deadline
        is due (:mod:`compactor.cleaner.schedule`), follow the broker's topic configs
        (:mod:`compactor.config.follow`), and every 10 s give the driver's freed native memory
        back (step 3; :mod:`compactor.ops.native_heap`)."""
        passes = self._passes
        passes.next_full = time.monotonic() + run.backoff_s
        refresh_s = self.config.config_refresh_interval_ms / 1000
        next_refresh = time.monotonic() + refresh_s
        while query.isActive:
            run.mirror.carry_tombstones()  # the last batch's readers, before a pass reads
            self.native_heap.maybe_trim()
            run.history.maybe_flush()
            run.check_source()
            if refresh_s > 0 and time.monotonic() >= next_refresh:
                next_refresh = time.monotonic() + refresh_s
                if refresh_topic_configs(self.config):
                    passes.everything_now()  # a pass under the new configs, now
            if self._stop.is_set() and not run.mirror.in_batch:
                query.stop()
                break
            topics = [] if once else passes.take(time.monotonic())
            if topics != []:
                passes.passed(topics is None, run.clean(until_idle=False, topics=topics))
                continue
            run.mirror.merge_tables()  # beside a running batch too: it waits for its commit
            time.sleep(0.2)

    def close(self) -> None:
        """Stop the Spark session this engine used (its workers' Kafka clients go with it)."""
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()

    def clean(self, topics: list[str] | None, force: bool, dry_run: bool) -> PassReport:
        """One maintenance pass now, without mirroring (``compactor clean``)."""
        from streaming.session import build_session

        spark = build_session(self.config.spark)
        return LogMaintenance(spark, self.config, self.commit_lock).run_pass(
            topics, force=force, dry_run=dry_run)


@dataclass
class _Run:
    """What one :meth:`Service.run` wired together."""

    config: CompactorConfig
    mirror: Any  # streaming.query.Mirror, imported with Spark
    cleaner: LogMaintenance
    metrics: Any  # compactor.ops.metrics.Metrics when metrics.port is set
    on_pass: Callable[[PassReport], None] | None
    summary: RunSummary
    gap: SourceGap
    history: History
    group: GroupCommitter | None = None

    def check_source(self) -> None:
        """Move the topics' caught-up times and reconcile a topic the lake fell
        ``delete.retention.ms`` behind (:mod:`compactor.erasure.source_gap`); a broker or lake
        failure is logged and tried again at the next look."""
        try:
            self.gap.check()
        except fencing.FencedError:
            raise
        except CompactorError as exc:
            log.warning("checking how current the lake is with its topics failed (tried again "
                        "shortly): %s", exc)

    @property
    def backoff_s(self) -> float:
        return self.config.cleaner.backoff_ms / 1000

    def clean(self, until_idle: bool, topics: list[str] | None = None) -> float:
        """Run passes (over ``topics``, default all); returns when (monotonic) one of them
        is next due."""
        reports = (self.cleaner.run_until_idle() if until_idle
                   else [self.cleaner.run_pass(topics)])
        for report in reports:
            self.summary.cleaning.add(report)
            log_pass_end(report)
            self.history.on_pass(report, self.cleaner.uncleanable)
            if self.metrics is not None:
                self.metrics.on_pass(report, self.cleaner.uncleanable)
            if self.on_pass is not None:
                self.on_pass(report)
        wake = time.monotonic() + self.backoff_s
        due_ms = self.cleaner.next_due_ms(topics=topics)
        if due_ms is not None:
            wake = min(wake, time.monotonic() + max(0.0, due_ms / 1000 - time.time()))
        return wake
