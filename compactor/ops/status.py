"""``compactor status``: what the lake and the broker say about every mirrored partition.

Everything comes from the Delta logs (and the broker's end offsets), so status works from any
process, while ``compactor run`` is running or not. JSON fields are a stable interface:
add to them, never rename them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from compactor.cleaner import uncleanable
from compactor.cleaner.cleanable import active_segment, cleanable_range
from compactor.config import CompactorConfig
from compactor.erasure.ledger import ErasureLedger
from compactor.exceptions import CompactorError
from compactor.kafka.broker_offsets import OffsetReader
from compactor.lake.app_transactions import position_lookup
from compactor.lake.layout import open_table, topic_paths
from compactor.lake.log_follower import follow, log_view
from compactor.lake.segments import PartitionLog, read_partition_logs
from compactor.positions import CAUGHT_UP


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    broker_end_offset: int | None  # None when the broker could not be asked
    mirrored_offset: int  # the next offset the mirror will write
    lag: int | None
    log_start_offset: int
    log_end_offset: int
    segments: int
    active_segment: int | None  # base offset; None when the last segment counts as rolled
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    dirty_ratio: float
    earliest_uncleaned_ms: int | None
    max_compaction_delay_ms: int
    overdue: bool  # must be cleaned now (KIP-354)
    next_forced_cleaning_ms: int | None  # when max.compaction.lag.ms forces cleaning next
    records: int = 0  # records in the log now, tombstones included
    size_bytes: int = 0  # Parquet bytes of the log's live files
    # a cleaning pass failed then (compactor.cleaner.uncleanable)
    uncleanable_since_ms: int | None = None
    uncleanable_reason: str | None = None
    data_files: int = 0  # the log's live files; consolidation keeps a closed segment at one
    most_files_in_a_closed_segment: int = 0
    cleaning_held_by: str | None = None  # why cleaning stops before the active segment


@dataclass(frozen=True)
class ErasureStatus:
    pending: int
    oldest_pending_age_ms: int | None
    missed_deadlines: int


@dataclass(frozen=True)
class SourceStatus:
    """How current the lake is with its topic (:mod:`compactor.erasure.source_gap`)."""

    caught_up_ms: int | None  # every record the broker held before it is in the lake
    reconciled_keys: int | None = None  # keys the topic erased unseen, per the ledger
    last_reconciled_ms: int | None = None


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    cleanup_policy: str
    max_compaction_lag_ms: int | None
    partitions: list[PartitionStatus] = field(default_factory=list)
    erasure: ErasureStatus = ErasureStatus(0, None, 0)
    deadline_warning: str | None = None  # the erasure deadline is best effort, and why
    source: SourceStatus = SourceStatus(None)


class BrokerEnds:
    """The broker's end offset of every partition of the configured topics, asked through one
    consumer kept for every call: a process that asks every few seconds (the metrics, the
    progress lines) would otherwise connect and fetch the cluster's metadata anew each time."""

    def __init__(self, config: CompactorConfig) -> None:
        self._config = config
        self._reader: OffsetReader | None = None
        self._lock = threading.Lock()  # one request at a time through the kept consumer

    def __call__(self) -> dict[tuple[str, int], int]:
        with self._lock:
            if self._reader is None:
                self._reader = OffsetReader(self._config.kafka_client_config(), timeout_s=5.0)
            reader = self._reader
            return reader.offsets(reader.partitions(list(self._config.topics), None), "latest")


def broker_end_offsets(config: CompactorConfig) -> dict[tuple[str, int], int]:
    """The broker's end offset of every partition of the configured topics, asked once."""
    return BrokerEnds(config)()


def _broker_ends(config: CompactorConfig, ends: BrokerEnds | None
                 ) -> tuple[dict[tuple[str, int], int], str | None]:
    try:
        return (ends or BrokerEnds(config))(), None
    except CompactorError as exc:
        return {}, str(exc)


def _logs(config: CompactorConfig, topic: str, followed: bool
          ) -> tuple[Mapping[int, PartitionLog], dict[int, uncleanable.Uncleanable], int | None]:
    """A topic's partition logs, uncleanable partitions and caught-up time: read whole from a
    fresh snapshot (a one-off ``status``), or through this process's log follower (a running
    mirror's metrics, refreshed after every cleaning pass), which reads only the commits since
    its last look and leaves out the uncleanable reasons the metrics do not show."""
    uri = topic_paths(config.lake_path, topic).log
    if followed:
        view = log_view(uri, config.storage)
        if view is None:
            return {}, {}, None
        position = follow(uri, config.storage).position
        marked = {p: since for p in view.partitions
                  if (since := uncleanable.marked_at(position, p)) is not None}
        return view.partitions, {p: uncleanable.Uncleanable(since, None)
                                 for p, since in marked.items()}, position(CAUGHT_UP.id())
    table = open_table(uri, config.storage)
    if table is None:
        return {}, {}, None
    lookup = position_lookup(table, uri, config.storage)  # thousands of positions, one read
    logs = read_partition_logs(table, position=lookup)
    return logs, uncleanable.read(table, logs, lookup), lookup(CAUGHT_UP.id())


def _source(topic: str, caught_up: int | None, ledger: ErasureLedger,
            followed: bool) -> SourceStatus:
    """The caught-up time from the log; a one-off status also counts the ledger's
    reconciliations (a running mirror's metrics count them as they happen)."""
    if followed:
        return SourceStatus(caught_up)
    events = ledger.reconciled(topic)
    return SourceStatus(caught_up, len(events),
                        max((e["atMs"] for e in events), default=None))


def collect_status(config: CompactorConfig, now_ms: int | None = None,
                   ask_broker: bool = True, ledger: ErasureLedger | None = None,
                   followed: bool = False, broker: BrokerEnds | None = None
                   ) -> tuple[list[TopicStatus], str | None]:
    """Every topic's status; the second value says why broker figures are missing, if so.

    A process that asks again and again passes the same ``ledger``, ``followed=True`` and the
    same ``broker``, so each call reads only what was committed since the last (see
    :func:`_logs` and :meth:`ErasureLedger.backlog`) and asks through one kept consumer."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ends, broker_error = _broker_ends(config, broker) if ask_broker else ({}, "not asked")
    ledger = ErasureLedger(config) if ledger is None else ledger
    topics = []
    for topic in config.topics:
        tc = config.topic(topic)
        logs, stuck, caught_up = _logs(config, topic, followed)
        partitions = []
        for partition in sorted(set(logs) | {p for t, p in ends if t == topic}):
            plog = logs.get(partition)
            end = ends.get((topic, partition))
            if plog is None:
                partitions.append(PartitionStatus(
                    topic, partition, end, 0, end, 0, 0, 0, None, 0, 0, 0, 0, 0.0, None, 0,
                    False, None))
                continue
            rng = cleanable_range(plog, tc, now)
            active = active_segment(plog, tc.roll_ms, now)
            mirrored = (plog.committed_offset + 1) if plog.committed_offset is not None else 0
            forced = None
            if tc.erasure_deadline:
                times = []
                if rng.earliest_dirty_ms is not None:
                    times.append(rng.earliest_dirty_ms + tc.cleaning_lag_ms)
                if active is not None:
                    times.append(active.roll_deadline_ms(tc.roll_ms))
                forced = min(times) if times else None
            partitions.append(PartitionStatus(
                topic=topic, partition=partition, broker_end_offset=end,
                mirrored_offset=mirrored, lag=None if end is None else max(0, end - mirrored),
                log_start_offset=plog.log_start_offset, log_end_offset=plog.log_end_offset,
                segments=len(plog.segments),
                active_segment=active.base_offset if active is not None else None,
                first_dirty_offset=rng.first_dirty_offset,
                first_uncleanable_offset=rng.first_uncleanable_offset,
                clean_bytes=rng.clean_bytes, dirty_bytes=rng.cleanable_bytes,
                dirty_ratio=round(rng.dirty_ratio, 4), earliest_uncleaned_ms=rng.earliest_dirty_ms,
                max_compaction_delay_ms=rng.max_compaction_delay_ms, overdue=rng.must_clean,
                next_forced_cleaning_ms=forced,
                records=sum(seg.records for seg in plog.segments),
                size_bytes=sum(seg.size_bytes for seg in plog.segments),
                data_files=sum(len(seg.files) for seg in plog.segments),
                most_files_in_a_closed_segment=max(
                    (len(seg.files) for seg in plog.segments if seg is not active), default=0),
                uncleanable_since_ms=stuck[partition].since_ms if partition in stuck else None,
                uncleanable_reason=stuck[partition].reason if partition in stuck else None,
                cleaning_held_by=rng.held_by,
            ))
        backlog = ledger.backlog(topic, now)
        topics.append(TopicStatus(
            topic, ",".join(sorted(tc.cleanup_policy)),
            tc.erasure_deadline_ms, partitions,
            ErasureStatus(backlog.pending, backlog.oldest_pending_age_ms,
                          backlog.missed_deadlines),
            tc.deadline_warning, _source(topic, caught_up, ledger, followed),
        ))
    return topics, broker_error


def status_json(topics: list[TopicStatus], broker_error: str | None, now_ms: int) -> dict[str, Any]:
    return {"generated_at_ms": now_ms, "broker_error": broker_error,
            "topics": [asdict(t) for t in topics]}


def _ms(value: int | None, now: int) -> str:
    if value is None:
        return "-"
    delta = (value - now) / 1000
    return f"in {delta:.0f}s" if delta >= 0 else f"{-delta:.0f}s ago"


def status_table(topics: list[TopicStatus], broker_error: str | None, now_ms: int) -> str:
    lines = []
    if broker_error:
        lines.append(f"(broker figures missing: {broker_error})")
    for t in topics:
        lag = (f", max.compaction.lag.ms={t.max_compaction_lag_ms}"
               if t.max_compaction_lag_ms else "")
        e = t.erasure
        oldest = ("-" if e.oldest_pending_age_ms is None
                  else f"{e.oldest_pending_age_ms / 1000:.0f}s")
        lines.append(f"{t.topic} (cleanup.policy={t.cleanup_policy}{lag}): erasures pending "
                     f"{e.pending}, oldest {oldest}, missed deadlines {e.missed_deadlines}")
        if t.deadline_warning:
            lines.append(f"  WARNING: {t.deadline_warning}")
        src = t.source
        if src.caught_up_ms is not None or src.reconciled_keys:
            lines.append(f"  lake held all the topic had: {_ms(src.caught_up_ms, now_ms)}; "
                         f"keys the topic erased unseen: {src.reconciled_keys or 0}"
                         + (f" (last reconciled {_ms(src.last_reconciled_ms, now_ms)})"
                            if src.last_reconciled_ms is not None else ""))
        lines.append(f"  {'part':>4} {'end':>9} {'mirrored':>9} {'lag':>7} {'log':>17} "
                     f"{'segs':>4} {'files':>5} {'dirty from':>10} {'dirty B':>9} {'ratio':>6} "
                     f"{'overdue':>7} {'forced cleaning':>15}")
        for p in t.partitions:
            end = "-" if p.broker_end_offset is None else str(p.broker_end_offset)
            lag_s = "-" if p.lag is None else str(p.lag)
            span = f"{p.log_start_offset}..{p.log_end_offset}"
            lines.append(
                f"  {p.partition:>4} {end:>9} {p.mirrored_offset:>9} {lag_s:>7} {span:>17} "
                f"{p.segments:>4} {p.data_files:>5} {p.first_dirty_offset:>10} {p.dirty_bytes:>9} "
                f"{p.dirty_ratio:>6.2f} {'YES' if p.overdue else 'no':>7} "
                f"{_ms(p.next_forced_cleaning_ms, now_ms):>15}")
            if p.cleaning_held_by is not None:
                lines.append(f"       cleaning held before offset {p.first_uncleanable_offset}"
                             f" by {p.cleaning_held_by}")
            if p.uncleanable_since_ms is not None:
                lines.append(f"       UNCLEANABLE since {_ms(p.uncleanable_since_ms, now_ms)}: "
                             f"{p.uncleanable_reason or 'reason older than the history searched'}"
                             " (skipped by passes until a forced pass or a restart succeeds)")
    return "\n".join(lines)
