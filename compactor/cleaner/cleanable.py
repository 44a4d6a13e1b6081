"""Choosing cleaning work, as Kafka's LogCleanerManager does, from the Delta log alone.

For one partition:

- the *first dirty offset* is the cleaner checkpoint (app transaction
  ``compactor-cleaner-<partition>``), or the log start when there is none or it lies outside
  the log;
- the *first uncleanable offset* is the smallest of the active segment's base (the log end when
  the active segment counts as rolled) and the base of the first dirty segment holding a record
  younger than ``min.compaction.lag.ms``;
- *clean bytes* are the segments wholly below the first dirty offset; *cleanable bytes* the
  segments from the one holding the first dirty offset up to the first uncleanable offset;
- the partition *must* be cleaned (KIP-354) when its earliest dirty non-active record is older
  than ``max.compaction.lag.ms`` and something is cleanable; it *may* be cleaned when its dirty
  ratio is strictly above ``min.cleanable.dirty.ratio``. Here the max lag is the deadline for
  *physical* erasure, so cleaning is forced earlier, at the topic's ``cleaning_lag_ms``
  (max lag - vacuum grace - a pass allowance), and vacuum finishes the job by the max lag.

One addition to Kafka: a partition holding a tombstone whose delete horizon has passed is due
as well, so that tombstones vanish ``delete.retention.ms`` after they were first kept even when
nothing new arrives (Kafka waits for the next dirty pass).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from compactor.config import TopicConfig
from compactor.lake.segments import PartitionLog, Segment


def active_segment(plog: PartitionLog, roll_ms: int, now_ms: int) -> Segment | None:
    """The segment still being appended to; None when the last one's deadline has passed."""
    last = plog.active
    if last is None or last.rolled_by(roll_ms, now_ms):
        return None
    return last


@dataclass(frozen=True)
class CleanableRange:
    """One partition's cleaning state at one instant (Kafka's LogToClean)."""

    partition: int
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    earliest_dirty_ms: int | None
    max_compaction_delay_ms: int
    tombstones_due: bool
    min_cleanable_ratio: float
    # Why cleaning stops before the active segment, when something holds it back there.
    held_by: str | None = None

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def must_clean(self) -> bool:
        return self.max_compaction_delay_ms > 0 and self.cleanable_bytes > 0

    @property
    def eligible(self) -> bool:
        return self.must_clean or self.dirty_ratio > self.min_cleanable_ratio or self.tombstones_due

    def why(self) -> str:
        """Why the partition is due, or why not, in a sentence (``clean --dry-run``)."""
        held = f"; cleaning stops at offset {self.first_uncleanable_offset}: held by " \
            f"{self.held_by}" if self.held_by else ""
        if self.must_clean:
            return (f"overdue by {self.max_compaction_delay_ms} ms under "
                    f"max.compaction.lag.ms{held}")
        if self.dirty_ratio > self.min_cleanable_ratio:
            return (f"dirty ratio {self.dirty_ratio:.2f} > min.cleanable.dirty.ratio "
                    f"{self.min_cleanable_ratio}{held}")
        if self.tombstones_due:
            return f"tombstones past their delete.retention.ms horizon{held}"
        if self.cleanable_bytes == 0:
            return ("no dirty records outside the active segment (it rolls at segment.ms or "
                    f"segment.bytes){held}")
        return (f"dirty ratio {self.dirty_ratio:.2f} <= min.cleanable.dirty.ratio "
                f"{self.min_cleanable_ratio}, nothing overdue under max.compaction.lag.ms, no "
                f"tombstone past its horizon{held}")


def cleanable_range(plog: PartitionLog, tc: TopicConfig, now_ms: int,
                    read_upto: int | None = None) -> CleanableRange:
    """``read_upto``: the last offset every tombstone reader has read (``tombstones``); no
    segment holding a later offset is cleanable. None: no bound (what status shows)."""
    active = active_segment(plog, tc.roll_ms, now_ms)
    closed = [s for s in plog.segments if s is not active]
    start, end = plog.log_start_offset, plog.log_end_offset
    checkpoint = plog.cleaner_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start

    uncleanable = active.base_offset if active is not None else end
    held_by = None
    dirty_closed = [s for s in closed if s.last_offset >= first_dirty]
    if tc.min_compaction_lag_ms > 0:
        for seg in dirty_closed:
            newest = seg.written_max_timestamp_ms
            if newest > now_ms - tc.min_compaction_lag_ms:
                uncleanable = min(uncleanable, seg.base_offset)
                held_by = (f"min.compaction.lag.ms={tc.min_compaction_lag_ms}: segment "
                           f"{seg.base_offset} holds records as recent as {_utc(newest)}, "
                           f"cleanable after {_utc(newest + tc.min_compaction_lag_ms)}")
                break
    if read_upto is not None:
        unread = [s.base_offset for s in plog.segments if s.last_offset > read_upto]
        if unread and min(unread) < uncleanable:
            uncleanable = min(unread)
            held_by = (f"the tombstone readers (erasure ledger, downstream tables) have read "
                       f"up to offset {read_upto}")
    uncleanable = max(first_dirty, uncleanable)

    clean = sum(s.record_bytes for s in plog.segments if s.last_offset < first_dirty)
    cleanable = sum(
        s.record_bytes for s in plog.segments
        if s.last_offset >= first_dirty and s.base_offset < uncleanable
    )
    stamps = [s.min_timestamp_ms for s in dirty_closed if s.min_timestamp_ms > 0]
    earliest = min(stamps, default=None)
    delay = 0
    if earliest is not None and earliest < now_ms - tc.cleaning_lag_ms:
        delay = now_ms - tc.cleaning_lag_ms - earliest
    due = any(
        s.min_delete_horizon_ms is not None and s.min_delete_horizon_ms <= now_ms
        for s in closed if s.base_offset < uncleanable
    )
    return CleanableRange(
        partition=plog.partition, log_start_offset=start, first_dirty_offset=first_dirty,
        first_uncleanable_offset=uncleanable, clean_bytes=clean, cleanable_bytes=cleanable,
        earliest_dirty_ms=earliest, max_compaction_delay_ms=delay, tombstones_due=due,
        min_cleanable_ratio=tc.min_cleanable_dirty_ratio, held_by=held_by,
    )


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def cleaning_order(ranges: Sequence[CleanableRange]) -> list[CleanableRange]:
    """Eligible partitions: overdue under max lag first (longest delay first), then by ratio."""
    eligible = [r for r in ranges if r.eligible]
    return sorted(eligible, key=lambda r: (not r.must_clean, -r.max_compaction_delay_ms,
                                           -r.dirty_ratio, r.partition))
