"""Prometheus metrics of ``compactor run`` on ``metrics.port``, named by Prometheus' rules.

Cleaner gauges (Kafka's LogCleaner / LogCleanerManager, in base units): max_compaction_delay_
seconds, max_dirty_ratio, cleaner_recopy_ratio, max_clean_time_seconds,
max_buffer_utilization_ratio, uncleanable_partitions, uncleanable_bytes. Plus records and bytes
ingested, records rejected, consumer lag per partition, per topic the erasure backlog, its
oldest age and missed deadlines, and duration histograms of the micro-batch, its commit, the
cleaning pass and the latest-value MERGE. All are prefixed ``compactor_``; counters have no
``_created`` series. Figures come from the same state as ``compactor status``.

The names before this release (``_secs``, ``_percent`` in 0-100, ``uncleanable_partitions_
count``: the design's public names, Kafka's snake_cased) are still exported, with the same
values in their old units, as deprecated aliases (:class:`_Aliased`): public names are added
to, never taken away.

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
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from compactor.cleaner.maintenance import PassReport
from compactor.config import CompactorConfig
from compactor.erasure.ledger import ErasureLedger
from compactor.erasure.reconcile import Reconciled
from compactor.ingest.batch_stats import BatchStats
from compactor.ops.health import serve
from compactor.ops.status import BrokerEnds, collect_status

_LAG_EVERY_S = 5.0
# A pass that committed nothing refreshes the lake's gauges at most this often: after every
# micro-batch of a busy mirror, a refresh over every partition of every topic cost more than
# the pass.
_REFRESH_EVERY_S = 5.0


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


# Seconds: a micro-batch or MERGE of a few ms up to a slow pass of minutes.
_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class _Aliased:
    """A gauge under its name, and under its name before this release (deprecated) in the
    old unit: ``scale`` times the value (100 for a ratio once given in percent)."""

    def __init__(self, gauge: Gauge, old: Gauge, scale: float = 1.0) -> None:
        self._gauge, self._old, self._scale = gauge, old, scale

    def set(self, value: float) -> None:
        self._gauge.set(value)
        self._old.set(value * self._scale)

    def labels(self, *values: str) -> _Aliased:
        return _Aliased(self._gauge.labels(*values), self._old.labels(*values), self._scale)


class Metrics:
    """The service's metrics; ``port`` 0 registers them without serving them."""

    def __init__(self, config: CompactorConfig, port: int = 0,
                 ledger: ErasureLedger | None = None) -> None:
        self._config = config
        # kept (the mirror's own, when given): each refresh reads only the ledger's new commits
        self._ledger = ErasureLedger(config) if ledger is None else ledger
        self._broker = BrokerEnds(config)  # the lag's end offsets, through one kept consumer
        self.registry = CollectorRegistry()
        r = self.registry

        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"compactor_{name}", doc, labels, registry=r)

        def renamed(name: str, old: str, doc: str, scale: float = 1.0,
                    labels: tuple[str, ...] = ()) -> _Aliased:
            return _Aliased(gauge(name, doc, labels),
                            gauge(old, f"Deprecated: compactor_{name}" + (
                                f" x {scale:g}" if scale != 1 else "") + ".", labels), scale)

        def histogram(name: str, doc: str) -> Histogram:
            return Histogram(f"compactor_{name}", doc, registry=r, buckets=_DURATION_BUCKETS)

        self.max_compaction_delay = renamed(
            "max_compaction_delay_seconds", "max_compaction_delay_secs", "Longest time a "
            "partition is overdue for cleaning under max.compaction.lag.ms (KIP-354).")
        self.max_dirty_ratio = renamed("max_dirty_ratio", "max_dirty_percent",
                                       "Highest dirty ratio (0-1).", 100)
        self.recopy_ratio = renamed("cleaner_recopy_ratio", "cleaner_recopy_percent",
                                    "Bytes written / bytes read by the last pass (0-1).", 100)
        self.max_clean_time = renamed("max_clean_time_seconds", "max_clean_time_secs",
                                      "Longest partition clean of the last pass.")
        self.buffer_utilization = renamed(
            "max_buffer_utilization_ratio", "max_buffer_utilization_percent",
            "Fullest offset map of the last pass (0-1).", 100)
        self.uncleanable_partitions = renamed(
            "uncleanable_partitions", "uncleanable_partitions_count",
            "Partitions whose cleaning failed.")
        self.batch_seconds = histogram("micro_batch_duration_seconds",
                                       "Micro-batches, from planning to their last step.")
        self.commit_seconds = histogram("ingest_commit_duration_seconds",
                                        "A micro-batch's lake commits (all its topics).")
        self.pass_seconds = histogram("cleaning_pass_duration_seconds", "Cleaning passes.")
        self.merge_seconds = histogram("table_merge_duration_seconds",
                                       "Latest-value table catch-ups (one topic's MERGE).")
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
        self.erasure_oldest = renamed("erasure_oldest_pending_age_seconds",
                                      "erasure_oldest_pending_age_secs",
                                      "Age of the oldest pending erasure.", labels=("topic",))
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
        self._last_refresh = float("-inf")  # the first pass refreshes
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

    def on_timing(self, step: str, seconds: float) -> None:
        """How long a step of the mirror took: ``batch``, ``commit`` or ``merge``."""
        {"batch": self.batch_seconds, "commit": self.commit_seconds,
         "merge": self.merge_seconds}[step].observe(seconds)

    def on_reconcile(self, result: Reconciled) -> None:
        self.reconciliations.labels(result.topic).inc()
        self.reconciled_keys.labels(result.topic).inc(result.keys)

    def on_pass(self, report: PassReport, uncleanable: Mapping[tuple[str, int], str]) -> None:
        results = [o.result for o in report.outcomes if o.result is not None]
        read = sum(r.stats.bytes_read for r in results)
        if read:
            self.recopy_ratio.set(sum(r.stats.bytes_written for r in results) / read)
        if results:
            self.max_clean_time.set(max(r.stats.seconds for r in results))
            self.buffer_utilization.set(max(r.stats.buffer_utilization for r in results))
        self.uncleanable_partitions.set(len(uncleanable))
        self.pass_seconds.observe(report.seconds)
        committed = {o.topic for o in report.outcomes if o.committed}
        for topic in committed:
            self.last_cleaning.labels(topic).set(time.time())
        if committed or time.monotonic() - self._last_refresh >= _REFRESH_EVERY_S:
            self.refresh(uncleanable)

    def refresh(self, uncleanable: Mapping[tuple[str, int], str] | None = None) -> None:
        """Recompute the state gauges from the lake (and, every few seconds, the broker)."""
        self._last_refresh = time.monotonic()
        ask = time.monotonic() - self._last_lag >= _LAG_EVERY_S
        topics, _ = collect_status(self._config, ask_broker=ask, ledger=self._ledger,
                                   followed=True, broker=self._broker)
        if ask:
            self._last_lag = time.monotonic()
        partitions = [p for t in topics for p in t.partitions]
        self.max_compaction_delay.set(
            max((p.max_compaction_delay_ms for p in partitions), default=0) / 1000)
        self.max_dirty_ratio.set(max((p.dirty_ratio for p in partitions), default=0))
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
