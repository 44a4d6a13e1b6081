"""``L/T/history``: a minute-by-minute record of how a topic's mirror fared, for the report.

The three questions of the demo's picture (is the mirror keeping up, is compaction on time,
are erasures inside their deadlines) asked over days need a history, and the lake's own
transaction logs keep commits only for the vacuum grace (an hour at most). So ``compactor
run`` keeps one row per topic and minute (with activity) in a Delta table beside the topic's
others: the micro-batches (records, bytes, rejections, and how old the newest record was when
its batch committed), the cleaning passes (partitions cleaned, records dropped, the largest
compaction delay under ``max.compaction.lag.ms``, partitions uncleanable). Erasures come from
the erasure ledger, which keeps them for ``erasure.ledger.retention.ms``.

Rows hold figures only, never a key or a value. They are appended every five minutes and at a
clean stop (a crash loses at most those five minutes of history, never data); once the table
holds ``PRUNE_AT_FILES`` files (two hours of a running mirror, or as many ``run --once``),
rows older than ``history.retention.ms`` are deleted, the files compacted into one, and the
removed files vacuumed at once (there is nothing personal in them to keep readers of old
snapshots for). The count comes from the table itself, so no run prunes at its start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

import pyarrow as pa
from deltalake import write_deltalake

from compactor.cleaner.maintenance import PassReport
from compactor.config import CompactorConfig
from compactor.exceptions import LakeError
from compactor.ingest.batch_stats import BatchStats
from compactor.lake import operations
from compactor.lake.layout import LOG_HYGIENE, ensure_table, open_table, topic_paths
from compactor.lake.storage import failure

log = logging.getLogger(__name__)

HISTORY_SCHEMA = pa.schema([
    ("minuteMs", pa.int64()), ("batches", pa.int32()), ("records", pa.int64()),
    ("recordBytes", pa.int64()), ("rejected", pa.int64()), ("mirrorDelayMs", pa.int64()),
    ("passes", pa.int32()), ("partitionsCleaned", pa.int32()), ("recordsDropped", pa.int64()),
    ("maxCompactionDelayMs", pa.int64()), ("uncleanable", pa.int32()),
])
HISTORY_PROPERTIES = {"delta.dataSkippingStatsColumns": "minuteMs",
                      "delta.enableChangeDataFeed": "false", **LOG_HYGIENE}
FLUSH_EVERY_S = 300.0
PRUNE_AT_FILES = 24  # two hours of appends: then old minutes go and the files become one


@dataclass
class Minute:
    """One topic's figures over one minute."""

    minuteMs: int  # the columns are named as the ledger's are
    batches: int = 0
    records: int = 0
    recordBytes: int = 0
    rejected: int = 0
    mirrorDelayMs: int | None = None
    passes: int = 0
    partitionsCleaned: int = 0
    recordsDropped: int = 0
    maxCompactionDelayMs: int | None = None
    uncleanable: int | None = None


class History:
    """Collects the service's figures per topic and minute and appends them to
    ``L/T/history``."""

    def __init__(self, config: CompactorConfig, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._clock = clock
        self._minutes: dict[tuple[str, int], Minute] = {}
        self._last_flush = clock()

    def _minute(self, topic: str, now_ms: int) -> Minute:
        start = now_ms - now_ms % 60_000
        return self._minutes.setdefault((topic, start), Minute(start))

    def on_batch(self, _batch_id: int, stats: Mapping[str, BatchStats]) -> None:
        now = int(self._clock() * 1000)
        for topic, s in stats.items():
            m = self._minute(topic, now)
            m.batches += 1
            m.records += s.read
            m.recordBytes += s.record_bytes
            m.rejected += s.rejected
            if s.newest_ms is not None:
                delay = max(0, now - s.newest_ms)
                m.mirrorDelayMs = max(m.mirrorDelayMs or 0, delay)

    def on_pass(self, report: PassReport, uncleanable: Mapping[tuple[str, int], str]) -> None:
        now = int(self._clock() * 1000)
        for topic in {o.topic for o in report.outcomes} | {t for t, _ in uncleanable}:
            mine = [o for o in report.outcomes if o.topic == topic]
            m = self._minute(topic, now)
            m.passes += 1
            m.partitionsCleaned += sum(1 for o in mine if o.committed)
            m.recordsDropped += sum(o.result.stats.records_dropped for o in mine
                                    if o.committed and o.result is not None)
            delays = [o.range.max_compaction_delay_ms for o in mine]
            if delays:
                m.maxCompactionDelayMs = max(m.maxCompactionDelayMs or 0, max(delays))
            m.uncleanable = sum(1 for t, _ in uncleanable if t == topic)

    def maybe_flush(self) -> None:
        """Append what was collected, every five minutes."""
        if self._clock() - self._last_flush >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Append the collected minutes (one commit per topic); a failure is logged, the rows
        kept for the next flush: history must never stop the mirror."""
        self._last_flush = self._clock()
        for topic in sorted({t for t, _ in self._minutes}):
            mine = sorted((k for k in self._minutes if k[0] == topic), key=lambda k: k[1])
            rows = pa.Table.from_pylist([asdict(self._minutes[k]) for k in mine],
                                        schema=HISTORY_SCHEMA)
            path = history_path(self._config, topic)
            try:
                table = ensure_table(path, HISTORY_SCHEMA, None, HISTORY_PROPERTIES,
                                     storage=self._config.storage)
                write_deltalake(table, rows, mode="append",
                                commit_properties=operations.properties(
                                    operations.RECORD_HISTORY,
                                    f"{rows.num_rows} minutes of {topic}'s figures"))
            except Exception as exc:
                log.warning("%s: cannot append the history (kept for the next try): %s",
                            path, failure(path, exc))
                continue
            for k in mine:
                del self._minutes[k]
            self._prune(path)

    def _prune(self, path: str) -> None:
        """Once the table holds ``PRUNE_AT_FILES`` files (whatever the runs that wrote them):
        delete the minutes older than ``history.retention.ms``, rewrite the files as one and
        delete the old ones at once (figures only: no reader of an old snapshot to keep)."""
        table = open_table(path, self._config.storage)
        if table is None or len(table.file_uris()) < PRUNE_AT_FILES:
            return
        keep_ms = self._config.history_retention_ms
        try:
            if keep_ms >= 0:
                table.delete(f"minuteMs < {int(self._clock() * 1000) - keep_ms}",
                             commit_properties=operations.properties(
                                 operations.PRUNE_HISTORY, f"minutes older than {keep_ms} ms "
                                 "removed"))
            table.optimize.compact(commit_properties=operations.properties(
                operations.PRUNE_HISTORY, "small files of the history rewritten as few"))
            table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        except Exception as exc:
            log.warning("%s: cannot prune the history: %s", path, failure(path, exc))


def history_path(config: CompactorConfig, topic: str) -> str:
    return f"{topic_paths(config.lake_path, topic).root}/history"


def read_history(config: CompactorConfig, topic: str, since_ms: int) -> list[Minute]:
    """The topic's minutes since ``since_ms``, in time order."""
    path = history_path(config, topic)
    table = open_table(path, config.storage)
    if table is None:
        return []
    try:
        rows = table.to_pyarrow_dataset().to_table(
            filter=pa.compute.field("minuteMs") >= since_ms)
    except Exception as exc:
        raise LakeError(f"cannot read {path}: {failure(path, exc)}") from exc
    return sorted((Minute(**r) for r in rows.select(HISTORY_SCHEMA.names).to_pylist()),
                  key=lambda m: m.minuteMs)
