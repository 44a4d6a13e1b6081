"""Prometheus metrics of ``compactor run`` on ``metrics.port``, with Kafka's names snake_cased.

Cleaner gauges (Kafka's LogCleaner / LogCleanerManager): max_compaction_delay_secs,
max_dirty_percent, cleaner_recopy_percent, max_clean_time_secs, max_buffer_utilization_percent,
uncleanable_partitions_count, uncleanable_bytes. Plus records and bytes ingested, consumer lag
per partition, and per topic the erasure backlog, its oldest age and missed deadlines. All are
prefixed ``compactor_``. Figures come from the same state as ``compactor status``.

For on-call: the process and Python collectors (``process_*``, ``python_*``),
``compactor_build_info``, per topic the time of the last ingest and cleaning commit of this
process, missed deadlines as a counter, and the ``/healthz`` and ``/readyz`` endpoints
(:mod:`compactor.ops.health`) on the same port.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Info,
    PlatformCollector,
    ProcessCollector,
)

from compactor.cleaner.maintenance import PassReport
from compactor.config import CompactorConfig
from compactor.erasure.ledger import ErasureLedger
from compactor.erasure.reconcile import Reconciled
from compactor.ingest.writer import BatchStats
from compactor.ops.health import serve
from compactor.ops.status import collect_status

_LAG_EVERY_S = 5.0


def installed_version(dist: str) -> str:
    """The installed version of distribution ``dist``; "unknown" from a bare source tree."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def readiness_bound_s(config: CompactorConfig) -> float:
    """How long the mirror may go without an ingest commit while Kafka holds records it has
    not mirrored before ``/readyz`` says it is not keeping up: ten triggers, at least 60 s."""
    return max(60.0, 10 * config.trigger_interval_ms / 1000)


class Metrics:
    """The service's metrics; ``port`` 0 registers them without serving them."""

    def __init__(self, config: CompactorConfig, port: int = 0,
                 ledger: ErasureLedger | None = None) -> None:
        self._config = config
        # kept (the mirror's own, when given): each refresh reads only the ledger's new commits
        self._ledger = ErasureLedger(config) if ledger is None else ledger
        self.registry = CollectorRegistry()
        r = self.registry

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"compactor_{name}", doc, labels, registry=r)

        self.max_compaction_delay = gauge(
            "max_compaction_delay_secs", "Longest time a partition is overdue for cleaning "
            "under max.compaction.lag.ms (KIP-354).")
        self.max_dirty_percent = gauge("max_dirty_percent", "Highest dirty ratio, in percent.")
        self.recopy_percent = gauge(
            "cleaner_recopy_percent", "Bytes written / bytes read by the last pass, in percent.")
        self.max_clean_time = gauge("max_clean_time_secs", "Longest partition clean last pass.")
        self.buffer_utilization = gauge(
            "max_buffer_utilization_percent", "Fullest offset map of the last pass, in percent.")
        self.uncleanable_count = gauge(
            "uncleanable_partitions_count", "Partitions whose cleaning failed.")
        self.uncleanable_bytes = gauge(
            "uncleanable_bytes", "Dirty bytes of the partitions whose cleaning failed.")
        self.records = Counter("compactor_records_ingested", "Records mirrored into the lake.",
                               ["topic"], registry=r)
        self.bytes = Counter("compactor_bytes_ingested", "Record bytes mirrored (key, value, "
                             "headers).", ["topic"], registry=r)
        self.rejected = Counter(
            "compactor_records_rejected", "Records written to L/T/rejected, by kind: null_key "
            "(kept out of the log), undecodable (in the log, not in the latest-value table), "
            "headers (in the log with null headers).", ["topic", "reason"], registry=r)
        self.lag = gauge("consumer_lag", "Broker end offset minus the mirrored offset.",
                         ("topic", "partition"))
        self.erasure_backlog = gauge("erasure_backlog", "Tombstones some target has not "
                                     "erased yet.", ("topic",))
        self.erasure_oldest = gauge("erasure_oldest_pending_age_secs", "Age of the oldest "
                                    "pending erasure.", ("topic",))
        self.erasure_missed = gauge("erasure_missed_deadlines", "Erasures past their deadline "
                                    "or finished after it.", ("topic",))
        self.best_effort = gauge(
            "erasure_deadline_best_effort", "1 when the topic's max.compaction.lag.ms is "
            "shorter than the vacuum grace plus a pass allowance: its deadline is best effort.",
            ("topic",))
        self.last_ingest = gauge(
            "last_ingest_commit_timestamp_seconds", "When this process last committed records "
            "of the topic to its log (Unix time).", ("topic",))
        self.last_cleaning = gauge(
            "last_cleaning_commit_timestamp_seconds", "When this process last committed a "
            "cleaning of the topic's log (Unix time).", ("topic",))
        self.missed_total = Counter(
            "compactor_erasure_deadlines_missed", "Erasures that missed their deadline, as the "
            "ledger counts them (a counter; erasure_missed_deadlines is the same as a gauge).",
            ["topic"], registry=r)
        self._missed_seen: dict[str, int] = {}
        self.reconciliations = Counter(
            "compactor_source_reconciliations", "Times the lake was reconciled with its topic's "
            "keys because it had not held all the topic had for delete.retention.ms.",
            ["topic"], registry=r)
        self.reconciled_keys = Counter(
            "compactor_source_reconciled_keys", "Keys the topic erased while the mirror could "
            "not read their tombstones, erased from the lake by a reconciliation.", ["topic"],
            registry=r)
        self.caught_up = gauge(
            "source_caught_up_timestamp_seconds", "When the lake last held every record the "
            "topic had on the broker (Unix time); the lake is reconciled with the topic once "
            "this is delete.retention.ms old.", ("topic",))
        for topic in config.topics:
            self.best_effort.labels(topic).set(int(config.topic(topic).deadline_best_effort))
            self.missed_total.labels(topic)  # shown as 0 from the start
            self.reconciliations.labels(topic)
            self.reconciled_keys.labels(topic)
        Info("compactor_build", "Versions of this compactor and what it runs on.",
             registry=r).info({
                 "version": installed_version("kafka-lake-compactor"),
                 "python": platform.python_version(),
                 "pyspark": installed_version("pyspark"),
                 "deltalake": installed_version("deltalake"),
                 "confluent_kafka": installed_version("confluent-kafka")})
        ProcessCollector(registry=r)  # process_* (memory, CPU, open fds): empty off Linux
        PlatformCollector(registry=r)  # python_info
        GCCollector(registry=r)  # python_gc_*
        self.alive: Callable[[], bool] = lambda: False  # the service sets it to its query's
        self._started = time.time()
        self._last_ingest_s: dict[str, float] = {}
        self._lag_total: int | None = None
        self._last_lag = 0.0
        if port:
            serve(port, self.registry, self.liveness, self.readiness)

    def liveness(self) -> tuple[bool, str]:
        """``/healthz``: the streaming query is running."""
        if self.alive():
            return True, "ok: the mirror query is running"
        return False, "the mirror query is not running"

    def readiness(self, now: float | None = None) -> tuple[bool, str]:
        """``/readyz``: alive, and an ingest commit within :func:`readiness_bound_s` (counted
        from start before the first one), or nothing on the broker left to mirror."""
        ok, why = self.liveness()
        if not ok:
            return ok, why
        now = time.time() if now is None else now
        bound = readiness_bound_s(self._config)
        age = now - max(self._last_ingest_s.values(), default=self._started)
        if age <= bound:
            return True, f"ok: last ingest commit {age:.0f}s ago (bound {bound:.0f}s)"
        if self._lag_total == 0:
            return True, "ok: caught up with the broker, nothing new to mirror"
        lag = "unknown" if self._lag_total is None else str(self._lag_total)
        return False, (f"no ingest commit for {age:.0f}s (bound {bound:.0f}s) with a lag of "
                       f"{lag} records")

    def on_batch(self, _batch_id: int, stats: Mapping[str, BatchStats]) -> None:
        now = time.time()
        for topic, s in stats.items():
            self.records.labels(topic).inc(s.records)
            self.bytes.labels(topic).inc(s.record_bytes)
            for kind, n in s.rejections.counts.items():
                self.rejected.labels(topic, kind).inc(n)
            self.last_ingest.labels(topic).set(now)
            self._last_ingest_s[topic] = now

    def on_reconcile(self, result: Reconciled) -> None:
        self.reconciliations.labels(result.topic).inc()
        self.reconciled_keys.labels(result.topic).inc(result.keys)

    def on_pass(self, report: PassReport, uncleanable: Mapping[tuple[str, int], str]) -> None:
        results = [o.result for o in report.outcomes if o.result is not None]
        read = sum(r.stats.bytes_read for r in results)
        if read:
            self.recopy_percent.set(100.0 * sum(r.stats.bytes_written for r in results) / read)
        if results:
            self.max_clean_time.set(max(r.stats.seconds for r in results))
            self.buffer_utilization.set(100.0 * max(r.stats.buffer_utilization
                                                    for r in results))
        self.uncleanable_count.set(len(uncleanable))
        for topic in {o.topic for o in report.outcomes if o.committed}:
            self.last_cleaning.labels(topic).set(time.time())
        self.refresh(uncleanable)

    def refresh(self, uncleanable: Mapping[tuple[str, int], str] | None = None) -> None:
        """Recompute the state gauges from the lake (and, every few seconds, the broker)."""
        ask = time.monotonic() - self._last_lag >= _LAG_EVERY_S
        topics, _ = collect_status(self._config, ask_broker=ask, ledger=self._ledger,
                                   followed=True)
        if ask:
            self._last_lag = time.monotonic()
        partitions = [p for t in topics for p in t.partitions]
        self.max_compaction_delay.set(
            max((p.max_compaction_delay_ms for p in partitions), default=0) / 1000)
        self.max_dirty_percent.set(100.0 * max((p.dirty_ratio for p in partitions), default=0))
        self.uncleanable_bytes.set(sum(p.dirty_bytes for p in partitions
                                       if (p.topic, p.partition) in (uncleanable or {})))
        lags = [p.lag for p in partitions if p.lag is not None]
        for p in partitions:
            if p.lag is not None:
                self.lag.labels(p.topic, str(p.partition)).set(p.lag)
        if ask:
            self._lag_total = sum(lags) if len(lags) == len(partitions) else None
        for t in topics:
            if t.source.caught_up_ms is not None:
                self.caught_up.labels(t.topic).set(t.source.caught_up_ms / 1000)
            self.erasure_backlog.labels(t.topic).set(t.erasure.pending)
            self.erasure_oldest.labels(t.topic).set((t.erasure.oldest_pending_age_ms or 0) / 1000)
            self.erasure_missed.labels(t.topic).set(t.erasure.missed_deadlines)
            newly = t.erasure.missed_deadlines - self._missed_seen.get(t.topic, 0)
            if newly > 0:
                self.missed_total.labels(t.topic).inc(newly)
                self._missed_seen[t.topic] = t.erasure.missed_deadlines
