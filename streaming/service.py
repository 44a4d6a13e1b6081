"""The long-running service behind ``compactor run``: the mirror query plus log maintenance.

The mirror's micro-batches and the cleaner's passes share one commit lock, so no two commits
of this process to the same log overlap. The cleaner runs every ``log.cleaner.backoff.ms``
and right after each micro-batch commit, also when no new data arrives (deadlines are kept
by the wall clock). With ``--once``, the mirror catches up and then passes run until nothing
is due.

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
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from compactor.cleaner.maintenance import LogMaintenance, PassReport
from compactor.config import CompactorConfig, resolve_config
from compactor.erasure.downstream import check_downstream
from compactor.exceptions import CompactorError
from compactor.ingest.incarnation import Incarnations
from compactor.ingest.writer import BatchStats
from compactor.lake import fencing
from compactor.lake.layout import topic_paths
from compactor.ops.engine import RunSummary
from compactor.ops.progress import IngestProgress, log_pass_end
from compactor.ops.status import broker_end_offsets

log = logging.getLogger(__name__)


class Service:
    """Owns the Spark session, the mirror and the maintenance of one configuration.

    The ``spark`` engine of :mod:`compactor.ops.engine` (the ``compactor.engines`` entry point).
    """

    def __init__(self, config: CompactorConfig) -> None:
        self.config = resolve_config(config)
        check_downstream(self.config)
        self._stop = threading.Event()
        self._batch_done = threading.Event()
        self.commit_lock = threading.Lock()

    def request_stop(self, signum: int | None = None, _frame: FrameType | None = None) -> None:
        if signum is not None:
            log.info("received %s: stopping after the current commit",
                     signal.Signals(signum).name)
        self._stop.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)

    def run(
        self, once: bool = False,
        on_batch: Callable[[int, Mapping[str, BatchStats]], None] | None = None,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> RunSummary:
        """Mirror and maintain until stopped (``once``: until everything due now is done)."""
        from streaming.query import Mirror
        from streaming.session import build_session

        started = time.monotonic()
        spark = build_session(self.config.spark)
        mirror = Mirror(spark, self.config, self.commit_lock)
        mirror.listeners.append(lambda _id, _stats: self._batch_done.set())
        if on_batch is not None:
            mirror.listeners.append(on_batch)
        cleaner = (LogMaintenance(spark, self.config, self.commit_lock,
                                  nothing_in_flight=lambda: not mirror.in_batch,
                                  readers=mirror.readers)
                   if self.config.cleaner.enable else None)
        generations = {t: fencing.claim(
            topic_paths(self.config.lake_path, t).log, self.config.storage)
                       for t in self.config.topics}
        mirror.generations.update(generations)
        if cleaner is not None:
            cleaner.generations.update(generations)
        mirror.incarnations = Incarnations(self.config)
        mirror.incarnations.claim()  # a recreated topic stops the run here
        log.info("writer generation %s", ", ".join(f"{t}={g}" for t, g in generations.items()))
        summary = RunSummary(ingest=mirror.totals)
        metrics = None
        if self.config.metrics_port:
            from compactor.ops.metrics import Metrics

            metrics = Metrics(self.config, self.config.metrics_port)
            mirror.listeners.append(metrics.on_batch)
            log.info("metrics on http://0.0.0.0:%d/metrics", self.config.metrics_port)
        if cleaner is not None:
            mirror.table_hooks.append(cleaner.note_removed)
        progress = IngestProgress(lambda: broker_end_offsets(self.config))
        mirror.listeners.append(progress.on_batch)

        def clean(until_idle: bool) -> float:
            """Run passes; returns when (monotonic) the next one is due."""
            if cleaner is None:
                return float("inf")
            for report in cleaner.run_until_idle() if until_idle else [cleaner.run_pass()]:
                summary.cleaning.add(report)
                log_pass_end(report)
                if metrics is not None:
                    metrics.on_pass(report, cleaner.uncleanable)
                if on_pass is not None:
                    on_pass(report)
            wake = time.monotonic() + backoff_s
            due_ms = cleaner.next_due_ms()
            if due_ms is not None:
                wake = min(wake, time.monotonic() + max(0.0, due_ms / 1000 - time.time()))
            return wake

        query = mirror.start(once=once)
        mirror.merge_tables(force=True)  # repairs a table a crash left behind its log
        for topic in self.config.topics:  # and done events a crash lost
            for target, upto in mirror.ledger.reconcile(topic).items():
                log.info("erasure ledger of %s: %s had finished up to %s before a crash",
                         topic, target, upto)
        log.info("mirroring %s from %s into %s", ",".join(self.config.topics),
                 self.config.bootstrap_servers, self.config.lake_path)
        backoff_s = self.config.cleaner.backoff_ms / 1000
        next_clean = time.monotonic() + backoff_s
        try:
            while query.isActive:
                if self._stop.is_set() and not mirror.in_batch:
                    query.stop()
                    break
                if not once and (self._batch_done.is_set() or time.monotonic() >= next_clean):
                    self._batch_done.clear()
                    next_clean = clean(until_idle=False)
                    continue
                if self.config.table_merge_interval_ms and not mirror.in_batch:
                    mirror.merge_tables()
                time.sleep(0.2)
            failure: Any = query.exception()
            if failure is not None:
                raise mirror.error(failure)
            if once and not self._stop.is_set():
                mirror.merge_tables(force=True)
                clean(until_idle=True)
        except CompactorError:
            raise
        except Exception as exc:
            raise mirror.error(exc) from exc
        finally:
            if query.isActive:
                query.stop()
        summary.seconds = time.monotonic() - started
        return summary

    def clean(self, topics: list[str] | None, force: bool, dry_run: bool) -> PassReport:
        """One maintenance pass now, without mirroring (``compactor clean``)."""
        from streaming.session import build_session

        spark = build_session(self.config.spark)
        return LogMaintenance(spark, self.config, self.commit_lock).run_pass(
            topics, force=force, dry_run=dry_run)
