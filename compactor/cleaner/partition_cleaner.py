"""The cleaner: one pass over one partition, run as a Spark task (Kafka's ``Cleaner``).

A pass, given a :class:`CleanPlan` built on the driver from one Delta snapshot:

1. Retention: the files of segments that ``retention.ms``/``retention.bytes`` expired are removed.
2. Offset map: keys of the dirty range [first dirty, first uncleanable) are read in offset
   order into an :class:`~compactor.offset_map.OffsetMap`; when it fills, the pass ends at the
   last offset that fit (``end``) and the next pass continues from there.
3. Rewrite: segments below ``end`` are grouped, neighbours together up to ``segment.bytes``.
   A record is kept when its key is not in the map or its offset is at least the map's. A
   kept tombstone gets ``deleteHorizonMs`` = now + ``delete.retention.ms`` the first time; one
   whose horizon has passed is dropped, once the latest-value table has merged it
   (``table_merged_upto``): a table that merges on a cadence must see every tombstone, or it
   would keep the erased key's value (``delete.retention.ms`` is a minimum, as in Kafka). A
   group in which nothing is dropped or stamped is not touched; any other group becomes one
   new file in the segment of its first member. Offsets, timestamps and headers are copied
   unchanged.
4. Consolidation: closed segments of several files (and runs of the active segment's small
   files) that step 3 left alone are rewritten as one file each, no record changed
   (:mod:`compactor.cleaner.consolidation`).
5. The task returns the files to remove and add and the new checkpoint (``end``); the driver
   commits them in one Delta commit (see :mod:`compactor.cleaner.maintenance`).

Nothing is visible until that commit: a task that dies leaves only unreferenced files, which
vacuum removes.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor.cleaner.cleanable import CleanableRange
from compactor.cleaner.consolidation import MergeRun, merge_run
from compactor.cleaner.offset_map import OffsetMap, digests
from compactor.lake import operations
from compactor.lake.datafiles import DataFileBuilder, WrittenFile
from compactor.lake.range_reader import file_batches
from compactor.lake.segments import DataFile, Segment
from compactor.lake.storage import Storage

_MAP_COLUMNS = ["key", "offset"]
_CHECK_COLUMNS = ["key", "value", "offset", "deleteHorizonMs"]
# Records a group's first look reads (keys and offsets) before deciding on all its columns.
_PROBE_ROWS = 4096


@dataclass(frozen=True)
class CleanPlan:
    topic: str
    partition: int
    log_path: str
    range: CleanableRange
    segments: tuple[Segment, ...]  # closed segments below the first uncleanable offset
    expired: tuple[int, ...]  # base offsets of segments retention deletes
    compact: bool
    segment_bytes: int
    delete_retention_ms: int
    buffer_bytes: int
    load_factor: float
    io_max_bytes_per_second: float
    now_ms: int
    storage: Storage
    merge: tuple[MergeRun, ...] = ()  # files to rewrite as one, no record changed
    # The last offset the latest-value table merged; a tombstone past it stays whatever its
    # horizon. None: no table holds values of this partition yet, nothing to wait for.
    table_merged_upto: int | None = None


@dataclass
class CleanStats:
    """What one pass did; the figures behind Kafka's cleaner metrics."""

    bytes_read: int = 0  # on-disk bytes of the files read (once per read)
    bytes_written: int = 0  # on-disk bytes of the files added
    record_bytes_written: int = 0
    kafka_model_bytes: int = 0  # record bytes Kafka's cleaner would recopy in this pass
    records_read: int = 0
    records_dropped: int = 0
    tombstones_stamped: int = 0
    tombstones_dropped: int = 0
    segments_deleted: int = 0
    files_merged: int = 0  # files rewritten as fewer by segment consolidation
    map_entries: int = 0
    map_capacity: int = 0
    map_full: bool = False
    seconds: float = 0.0

    @property
    def buffer_utilization(self) -> float:
        return self.map_entries / self.map_capacity if self.map_capacity else 0.0


@dataclass(frozen=True)
class CleanResult:
    topic: str
    partition: int
    checkpoint: int  # the next first dirty offset
    removed: tuple[DataFile, ...] = ()
    added: tuple[WrittenFile, ...] = ()
    stats: CleanStats = field(default_factory=CleanStats)
    error: str | None = None
    # Segment consolidation (compactor.cleaner.consolidation): the same records in fewer files.
    merged_from: tuple[DataFile, ...] = ()
    merged: tuple[WrittenFile, ...] = ()

    def operation(self) -> tuple[str, str]:
        """Name the cleaning commit by what it did: compaction, retention alone, or only
        positions; and the sentence for its ``userMetadata``."""
        s = self.stats
        if self.added or s.records_dropped or s.tombstones_stamped:
            operation = operations.CLEAN
        elif self.removed:
            operation = operations.RETENTION
        elif self.merged_from:
            operation = operations.REWRITE_SEGMENTS
        else:
            operation = operations.CHECKPOINT
        return operation, (
            f"{operation.lower()} {self.topic}-{self.partition}: checkpoint "
            f"{self.checkpoint}, {len(self.removed)} files removed, {len(self.added)} added, "
            f"{s.records_dropped} records dropped, {s.segments_deleted} segments deleted, "
            f"{s.files_merged} files merged into {len(self.merged)}")


class Throttler:
    """Keeps the bytes a pass reads and writes under ``log.cleaner.io.max.bytes.per.second``."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._start = time.monotonic()
        self._bytes = 0

    def add(self, nbytes: int) -> None:
        if self._rate == float("inf"):
            return
        self._bytes += nbytes
        ahead = self._bytes / self._rate - (time.monotonic() - self._start)
        if ahead > 0:
            time.sleep(ahead)


def _batches(plan: CleanPlan, f: DataFile, columns: list[str] | None,
             stats: CleanStats, throttle: Throttler) -> Iterator[pa.RecordBatch]:
    stats.bytes_read += f.size_bytes
    throttle.add(f.size_bytes)
    yield from file_batches(plan.log_path, f, columns, plan.storage,
                            f"{plan.topic}-{plan.partition}", use_threads=False)


def _build_map(plan: CleanPlan, live: list[Segment], omap: OffsetMap, stats: CleanStats,
               throttle: Throttler) -> int:
    """Fill the offset map from the dirty range (step 2); returns the end offset of this pass."""
    lo, hi = plan.range.first_dirty_offset, plan.range.first_uncleanable_offset
    for seg in live:
        for f in seg.files:
            if f.last_offset < lo or f.first_offset >= hi:
                continue
            inside = f.first_offset >= lo and f.last_offset < hi
            for batch in _batches(plan, f, _MAP_COLUMNS, stats, throttle):
                if not inside:
                    offsets = batch.column("offset")
                    batch = batch.filter(pc.and_(pc.greater_equal(offsets, lo),
                                                 pc.less(offsets, hi)))
                if batch.num_rows == 0:
                    continue
                keys = digests(batch.column("key"))
                taken = omap.put_batch(keys, batch.column("offset").to_numpy())
                if taken < batch.num_rows:
                    stats.map_full = True
                    return omap.latest_offset + 1 if omap.latest_offset >= lo else lo
    return hi


def _masks(batch: pa.RecordBatch, omap: OffsetMap, end: int, now_ms: int,
           table_upto: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(keep, stamp) for each record of a batch."""
    offsets = batch.column("offset").to_numpy()
    keep = ~omap.superseded(offsets, batch.column("key"))
    tombstone = pc.is_null(batch.column("value")).to_numpy(zero_copy_only=False)
    horizon = batch.column("deleteHorizonMs")
    stamped = pc.is_valid(horizon).to_numpy(zero_copy_only=False)
    expired = stamped & (pc.fill_null(horizon, 0).to_numpy() <= now_ms)
    if table_upto is not None:
        expired &= offsets <= table_upto
    keep &= ~(tombstone & expired)
    stamp = keep & tombstone & ~stamped & (offsets < end)
    return keep, stamp


def _groups(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Neighbouring segments together while their record bytes fit in ``segment.bytes``."""
    groups: list[list[Segment]] = []
    size = 0
    for seg in segments:
        if groups and size + seg.record_bytes <= max_bytes:
            groups[-1].append(seg)
            size += seg.record_bytes
        else:
            groups.append([seg])
            size = seg.record_bytes
    return groups


def _rewrite_group(plan: CleanPlan, group: list[Segment], omap: OffsetMap, end: int,
                   stats: CleanStats, throttle: Throttler) -> tuple[list[DataFile],
                                                                    WrittenFile | None]:
    """Rewrite one group of segments (step 3): ([], None) when nothing changes, else (removed,
    added).

    Files are checked in offset order up to the first that changes: first the keys and
    offsets of its first records (a record the map supersedes is usually among them), then,
    if none is, all records on the columns every decision needs (tombstones to stamp or
    expire). The files checked whole are then copied with their masks, and every later file
    is read whole once, decided and written batch by batch (the group is rewritten anyway).
    Where keys are superseded, a file's values are decoded once, to be written; nothing is
    held beyond one batch.
    """
    files = [f for seg in group for f in seg.files]
    if len(omap) == 0 and not any(
        f.min_delete_horizon_ms is not None and f.min_delete_horizon_ms <= plan.now_ms
        for f in files
    ):
        return [], None  # without a map only an expired tombstone can change a file
    checked: list[tuple[np.ndarray, np.ndarray]] = []
    for f in files:
        if _supersedes(plan, f, omap, throttle):
            break
        parts = [_masks(b, omap, end, plan.now_ms, plan.table_merged_upto)
                 for b in _batches(plan, f, _CHECK_COLUMNS, stats, throttle)]
        keep = np.concatenate([k for k, _ in parts]) if parts else np.ones(0, bool)
        stamp = np.concatenate([s for _, s in parts]) if parts else np.zeros(0, bool)
        checked.append((keep, stamp))
        stats.records_read += len(keep)
        if not keep.all() or stamp.any():
            break
    else:
        return [], None
    base = group[0].base_offset
    builder = DataFileBuilder(
        plan.log_path, f"partition={plan.partition}/segment={base}", "log",
        {"partition": str(plan.partition), "segment": str(base)}, storage=plan.storage,
    )
    horizon_ms = plan.now_ms + plan.delete_retention_ms
    try:
        for i, f in enumerate(files):
            row = 0
            for batch in _batches(plan, f, None, stats, throttle):
                n = batch.num_rows
                if i < len(checked):
                    k, s = checked[i][0][row:row + n], checked[i][1][row:row + n]
                else:
                    k, s = _masks(batch, omap, end, plan.now_ms, plan.table_merged_upto)
                    stats.records_read += n
                row += n
                _write_kept(builder, batch, k, s, horizon_ms, stats, throttle)
        added = builder.close()
    except BaseException:
        builder.abort()
        raise
    written = [f.modified_ms for f in files if f.modified_ms is not None]
    if added is not None and written:
        added = dataclasses.replace(added, modified_ms=max(written))
    if added is not None:
        stats.bytes_written += added.size
        stats.record_bytes_written += added.record_bytes
    return files, added


def _supersedes(plan: CleanPlan, f: DataFile, omap: OffsetMap, throttle: Throttler) -> bool:
    """A cheap first look: whether the map holds a later offset for a key among the first
    ``_PROBE_ROWS`` records of ``f`` (keys and offsets only). False decides nothing."""
    if len(omap) == 0:
        return False
    batch = next(file_batches(plan.log_path, f, _MAP_COLUMNS, plan.storage,
                              f"{plan.topic}-{plan.partition}", batch_rows=_PROBE_ROWS), None)
    if batch is None:
        return False
    throttle.add(batch.nbytes)  # what it decoded, the I/O rate's share of the look
    return bool(omap.superseded(batch.column("offset").to_numpy(), batch.column("key")).any())


def _write_kept(builder: DataFileBuilder, batch: pa.RecordBatch, keep: np.ndarray,
                stamp: np.ndarray, horizon_ms: int, stats: CleanStats,
                throttle: Throttler) -> None:
    """Write a batch's kept records, stamping the tombstones ``stamp`` marks."""
    tombstones = pc.is_null(batch.column("value")).to_numpy(zero_copy_only=False)
    stats.records_dropped += int((~keep).sum())
    stats.tombstones_dropped += int((~keep & tombstones).sum())
    stats.tombstones_stamped += int(stamp.sum())
    if stamp.any():
        column = batch.schema.get_field_index("deleteHorizonMs")
        stamped = pc.if_else(pa.array(stamp), pa.scalar(horizon_ms, pa.int64()),
                             batch.column(column))
        batch = batch.set_column(column, "deleteHorizonMs", stamped)
    kept = batch.filter(pa.array(keep))
    if kept.num_rows:
        builder.write(kept)
        throttle.add(kept.nbytes)


def _merge(plan: CleanPlan, removed: set[str], stats: CleanStats,
           throttle: Throttler) -> tuple[tuple[DataFile, ...], tuple[WrittenFile, ...]]:
    """Consolidate the planned runs this pass did not rewrite or expire (step 4)."""
    merged_from: list[DataFile] = []
    merged: list[WrittenFile] = []
    for run in plan.merge:
        if any(f.path in removed for f in run.files):
            continue
        new = merge_run(plan.log_path, plan.partition, run, plan.storage,
                        lambda f: _batches(plan, f, None, stats, throttle))
        merged_from.extend(run.files)
        stats.files_merged += len(run.files)
        if new is not None:
            merged.append(new)
            stats.bytes_written += new.size
            stats.record_bytes_written += new.record_bytes
    return tuple(merged_from), tuple(merged)


def clean_partition(plan: CleanPlan) -> CleanResult:
    """Run one pass (steps 1-3); errors come back in the result, not as an exception."""
    started = time.monotonic()
    stats = CleanStats()
    try:
        throttle = Throttler(plan.io_max_bytes_per_second)
        expired = set(plan.expired)
        removed = [f for s in plan.segments if s.base_offset in expired for f in s.files]
        stats.segments_deleted = len(expired)
        live = [s for s in plan.segments if s.base_offset not in expired]
        omap = OffsetMap(plan.buffer_bytes, plan.load_factor, plan.range.first_dirty_offset)
        stats.map_capacity = omap.capacity
        end = plan.range.first_dirty_offset
        if plan.compact and plan.range.first_dirty_offset < plan.range.first_uncleanable_offset:
            end = _build_map(plan, live, omap, stats, throttle)
        stats.map_entries = len(omap)
        added: list[WrittenFile] = []
        if plan.compact:
            below = [s for s in live if s.base_offset < max(end, plan.range.first_dirty_offset)]
            stats.kafka_model_bytes = sum(s.record_bytes for s in below)
            for group in _groups(below, plan.segment_bytes):
                gone, new = _rewrite_group(plan, group, omap, end, stats, throttle)
                removed.extend(gone)
                if new is not None:
                    added.append(new)
        merged_from, merged = _merge(plan, {f.path for f in removed}, stats, throttle)
        stats.seconds = time.monotonic() - started
        return CleanResult(plan.topic, plan.partition, max(end, plan.range.first_dirty_offset),
                           tuple(removed), tuple(added), stats, None, merged_from, merged)
    except Exception as exc:
        stats.seconds = time.monotonic() - started
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return CleanResult(plan.topic, plan.partition, plan.range.first_dirty_offset,
                           stats=stats, error=detail)
    finally:
        # Hand the allocator's free pages back: a task's memory is its pass, not the most any
        # earlier pass of the process once used (the allocator keeps what it freed otherwise).
        pa.default_memory_pool().release_unused()
