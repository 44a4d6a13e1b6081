"""Step 2 of :mod:`compactor.ingest.writer`'s protocol: records into segment files.

A write task hands the records it consumed to :func:`append_batches` (one partition's range,
streamed batch by batch) or to :func:`append_ranges` (many small ranges at once). The rules
that look at single records (offsets already committed are skipped; null keys of a compacted
topic and unreadable headers are reported to ``rejected``; tombstones are kept for the
readers) run once over all the rows a call holds, not once per partition; the segment roll
and the files are per partition. Tasks write files only; the driver commits them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from compactor.formats.reasons import loggable
from compactor.ingest.rejected import RecordChecker
from compactor.ingest.writer import PartitionPlan, RangeResult
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.datafiles import WrittenFile, write_data_file
from compactor.lake.layout import LOG_PARTITION_COLUMNS
from compactor.lake.log_files import LogGroup, LogPart, write_log_files, write_log_rows
from compactor.lake.range_reader import TOMBSTONE_COLUMNS, WrittenTombstones, no_tombstones
from compactor.lake.rejected import (
    HEADERS_REASON,
    NULL_KEY_REASON,
    Rejections,
    rejected_rows,
    rejection_kind,
)
from compactor.lake.segments import SegmentRoller, record_sizes
from compactor.lake.written_records import RANGE_BYTES, TASK_BYTES, WrittenRecords

# The newest segment's rows are written once their records hold this many bytes.
_FLUSH_BYTES = 64 * 1024 * 1024

_NONE_REJECTED = Rejections({}, None)

Rows = npt.NDArray[np.int64]  # a number per row
Mask = npt.NDArray[np.bool_]


class _SegmentBuffer:
    """Rows of one segment waiting to be written as one file."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.record_bytes = 0


@dataclass(frozen=True)
class _Taken:
    """An appender's rows left in its task's table (rows ``start`` to ``end``), all of them
    bound for one segment: written from there, never sliced out on their own."""

    segment: int
    start: int
    end: int
    record_bytes: int


@dataclass(frozen=True)
class _TaskRows:
    """A task's screened rows (Spark's Kafka schema) and the appender of each row."""

    table: pa.Table
    owner: Rows


def _rejections(partition: int, tables: list[pa.Table]) -> Rejections:
    """How many records went to ``rejected`` per kind, and the reason of the earliest."""
    if not tables:
        return _NONE_REJECTED
    counts: dict[str, int] = {}
    first: tuple[int, str] | None = None
    for table in tables:
        reasons = table.column("reason").to_pylist()
        for reason in reasons:
            kind = rejection_kind(reason)
            counts[kind] = counts.get(kind, 0) + 1
        if reasons:
            offsets = table.column("offset").to_numpy()
            at = int(offsets.argmin())
            if first is None or offsets[at] < first[0]:
                first = (int(offsets[at]), reasons[at])
    return Rejections(counts, None if first is None
                      else f"partition {partition} offset {first[0]}: {loggable(first[1])}")


class _Appender:
    """One plan's segment files, fed its screened records in offset order."""

    def __init__(self, plan: PartitionPlan) -> None:
        self.plan = plan
        self.committed = plan.committed_offset if plan.committed_offset is not None else -1
        self.rejected_floor = plan.rejected_offset if plan.rejected_offset is not None else -1
        self.roller = SegmentRoller(plan.active, plan.segment_bytes, plan.roll_ms)
        self.checker = RecordChecker(plan.formats, plan.topic) if plan.formats.typed else None
        self.buffers: dict[int, _SegmentBuffer] = {}
        self.rejected: list[pa.Table] = []
        self.tombstones: list[pa.Table] = []
        self.files: list[WrittenFile] = []
        # What the log files get, for the next MERGE (compactor.lake.written_records); None
        # once past RANGE_BYTES.
        self.written: list[pa.Table] | None = []
        self.written_bytes = 0
        self.taken: _Taken | None = None  # rows the task's table holds for it

    def count_written(self, record_bytes: int) -> bool:
        """Count records that go to the log; whether they are still kept for the MERGE."""
        if self.written is None:
            return False
        self.written_bytes += record_bytes
        if self.written_bytes > RANGE_BYTES:
            self.written = None
        return self.written is not None

    def add(self, rows: pa.Table, sizes: Rows, stamps_ms: Rows) -> None:
        """Assign ``rows`` (past the committed offset, none of them rejected) to segments and
        write every segment but the newest, which may still grow."""
        plan = self.plan
        if self.checker is not None:  # undecodable records stay in the log and are reported
            bad_rows = self.checker.undecodable(
                rows.filter(pc.greater(rows.column("offset"), self.rejected_floor)),
                plan.now_ms)
            if bad_rows is not None:
                self.rejected.append(bad_rows)
        if self.count_written(int(sizes.sum())) and self.written is not None:
            self.written.append(rows)
        offsets = rows.column("offset").to_numpy()
        segments = self.roller.assign_batch(offsets, stamps_ms, sizes)
        # Rows come in offset order, so each segment's rows are one slice.
        cuts = (np.flatnonzero(segments[1:] != segments[:-1]) + 1).tolist()
        for lo, hi in zip([0, *cuts], [*cuts, len(segments)], strict=True):
            part = rows if hi - lo == rows.num_rows else rows.slice(lo, hi - lo)
            buf = self.buffers.setdefault(int(segments[lo]), _SegmentBuffer())
            buf.tables.append(part)
            buf.record_bytes += int(sizes[lo:hi].sum())
        newest = int(segments[-1])
        for segment in [s for s in self.buffers
                        if s != newest or self.buffers[s].record_bytes > _FLUSH_BYTES]:
            self.files.extend(write_log_files(
                self.plan.log_path, [self._log_part(segment, self.buffers.pop(segment))],
                storage=self.plan.storage))

    def log_parts(self) -> list[LogPart]:
        """The log files still to write, one per buffered segment (the buffers emptied)."""
        parts = [self._log_part(segment, buf) for segment, buf in sorted(self.buffers.items())]
        self.buffers.clear()
        return parts

    def result(self, written: Sequence[WrittenFile] | None = None) -> RangeResult:
        """Describe the range's files, with ``written`` (what :meth:`log_parts` gave, written;
        None: write them now)."""
        plan = self.plan
        if written is None:
            written = write_log_files(plan.log_path, self.log_parts(), storage=plan.storage)
        self.files.extend(written)
        if self.rejected:
            table = pa.concat_tables(self.rejected).sort_by("offset")
            self.files.append(write_data_file(
                plan.rejected_path, "", table, int(record_sizes(table).sum()), "rejected",
                storage=plan.storage))
        rows = _own(self.tombstones) if self.tombstones else no_tombstones()
        return RangeResult(plan.topic, plan.partition, plan.end - 1, tuple(self.files),
                           WrittenTombstones(self.committed, plan.end - 1, rows),
                           _rejections(plan.partition, self.rejected))

    def _log_part(self, segment: int, buf: _SegmentBuffer) -> LogPart:
        """A segment buffer's rows as the log file to write."""
        return LogPart(self.plan.partition, segment, _log_columns(pa.concat_tables(buf.tables)),
                       buf.record_bytes)


def _log_columns(rows: pa.Table) -> pa.Table:
    """Rows of Spark's Kafka schema as a log file holds them."""
    table = rows.drop_columns(LOG_PARTITION_COLUMNS[:1])
    return table.append_column("deleteHorizonMs", pa.nulls(table.num_rows, pa.int64()))


def _rows_of(rows: _TaskRows, apps: Sequence[tuple[int, _Appender]]) -> pa.Table:
    """The task's rows that ``apps`` (index, appender; ascending) took, in their order."""
    chosen = np.zeros(int(rows.owner.max()) + 1, dtype=bool)
    chosen[[i for i, _ in apps]] = True
    mask = chosen[rows.owner]
    return rows.table if mask.all() else rows.table.filter(pa.array(mask))


def _write_all(apps: Sequence[_Appender], rows: _TaskRows | None = None) -> list[RangeResult]:
    """Every appender's result, the log files of all their topics written together: the rows
    they took from ``rows`` straight from that table, the others' from their buffers."""
    if not apps:
        return []
    taken = [(i, app) for i, app in enumerate(apps) if app.taken is not None]
    parts = [(i, part) for i, app in enumerate(apps) for part in app.log_parts()]
    tables: list[pa.Table] = []
    groups: list[LogGroup] = []
    if taken:
        assert rows is not None  # an appender takes rows of the task's table only
        tables.append(_log_columns(_rows_of(rows, taken)))
        groups.extend(LogGroup(app.plan.log_path, app.plan.partition, t.segment,
                               t.end - t.start, t.record_bytes)
                      for _, app in taken if (t := app.taken) is not None)
    for i, part in parts:
        tables.append(part.table)
        groups.append(LogGroup(apps[i].plan.log_path, part.partition, part.segment,
                               part.table.num_rows, part.record_bytes))
    files = write_log_rows(tables, groups, storage=apps[0].plan.storage)
    written: list[list[WrittenFile]] = [[] for _ in apps]
    for i, f in zip([i for i, _ in taken] + [i for i, _ in parts], files, strict=True):
        written[i].append(f)
    return [app.result(mine) for app, mine in zip(apps, written, strict=True)]


def _with_written(apps: Sequence[_Appender], results: list[RangeResult],
                  rows: _TaskRows | None = None) -> list[RangeResult]:
    """``results`` with the records the appenders' ranges put in the log (those of at most
    RANGE_BYTES, up to TASK_BYTES in all), as one table carried by the first result
    (compactor.lake.written_records); the rows an appender took are in ``rows``."""
    kept: list[tuple[int, _Appender]] = []
    sent = 0
    for i, app in enumerate(apps):
        if app.written is not None and sent + app.written_bytes <= TASK_BYTES:
            kept.append((i, app))
            sent += app.written_bytes
    if not kept or not results:
        return results
    taken = [(i, a) for i, a in kept if a.taken is not None]
    rest = [a for _, a in kept if a.taken is None]
    tables = [t for a in rest for t in a.written or ()]
    if taken:
        assert rows is not None  # an appender takes rows of the task's table only
        tables.insert(0, _rows_of(rows, taken))
    table = pa.concat_tables(tables).combine_chunks() if tables else KAFKA_SCHEMA.empty_table()
    ranges = tuple((a.plan.topic, a.plan.partition, a.committed, a.plan.end - 1,
                    t.end - t.start if (t := a.taken) is not None
                    else sum(w.num_rows for w in a.written or ()))
                   for a in [a for _, a in taken] + rest)
    return [replace(results[0], records=WrittenRecords(table, ranges)), *results[1:]]


def _own(tables: list[pa.Table]) -> pa.Table:
    """``tables`` (slices of a task's rows) as one table of its own buffers: a slice is
    pickled with the whole buffers it points into, and the result goes to the driver."""
    table = pa.concat_tables(tables)
    return table.take(pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _owned(owner: Rows, count: int) -> Iterator[tuple[int, int, int]]:
    """(owner, first row, end row) of each of ``count`` owners with rows in ``owner``
    (ascending)."""
    bounds = np.searchsorted(owner, np.arange(count + 1))
    for i in np.flatnonzero(np.diff(bounds)).tolist():
        yield i, int(bounds[i]), int(bounds[i + 1])


def _report(table: pa.Table, owner: Rows, mask: Mask, floor: Rows, reason: str,
            now_ms: int, apps: Sequence[_Appender]) -> None:
    """Give each appender its ``mask`` rows past its ``floor`` (not yet reported), as rows
    of ``rejected`` with ``reason``."""
    mask = mask & (table.column("offset").to_numpy() > floor)
    if not mask.any():
        return
    bad = table.filter(pa.array(mask))
    for i, lo, hi in _owned(owner[mask], len(apps)):
        apps[i].rejected.append(rejected_rows(bad.slice(lo, hi - lo), reason, None, now_ms))


def _feed(apps: Sequence[_Appender], table: pa.Table, owner: Rows,
          together: bool = False) -> _TaskRows | None:
    """Screen ``table`` (Spark's Kafka schema; ``owner``: the index of each row's appender,
    ascending, rows of one appender in offset order) and hand each appender its rows.

    ``together`` (one call for the appenders' whole ranges): an appender whose rows all go
    to its active segment takes them where they are (:class:`_Taken`) instead, and the
    screened rows are returned; the per-partition slicing and bookkeeping otherwise costs
    more than a small range's records."""
    committed = np.array([a.committed for a in apps], dtype=np.int64)[owner]
    keep = table.column("offset").to_numpy() > committed
    if not keep.all():
        table, owner = table.filter(pa.array(keep)), owner[keep]
    if table.num_rows == 0:
        return None
    now_ms = apps[0].plan.now_ms
    floor = np.array([a.rejected_floor for a in apps], dtype=np.int64)[owner]
    compact = np.array([a.plan.compact for a in apps])[owner]
    null_key = compact & pc.is_null(table.column("key")).to_numpy(zero_copy_only=False)
    if null_key.any():
        _report(table, owner, null_key, floor, NULL_KEY_REASON, now_ms, apps)
        table, owner, floor = table.filter(pa.array(~null_key)), owner[~null_key], floor[~null_key]
        if table.num_rows == 0:
            return None
    # Mirrored with null headers, and reported.
    no_headers = pc.is_null(table.column("headers")).to_numpy(zero_copy_only=False)
    if no_headers.any():
        _report(table, owner, no_headers, floor, HEADERS_REASON, now_ms, apps)
    erased = pc.and_(pc.is_null(table.column("value")), pc.is_valid(table.column("key")))
    if pc.any(erased).as_py():
        tombstones = table.filter(erased).select(TOMBSTONE_COLUMNS)
        for i, lo, hi in _owned(owner[erased.to_numpy(zero_copy_only=False)], len(apps)):
            apps[i].tombstones.append(tombstones.slice(lo, hi - lo))
    sizes = record_sizes(table)
    stamps_ms = table.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False) // 1000
    owned = list(_owned(owner, len(apps)))
    if together:
        starts = [lo for _, lo, _ in owned]
        totals = np.add.reduceat(sizes, starts).tolist()
        earliest = np.minimum.reduceat(stamps_ms, starts).tolist()
        latest = np.maximum.reduceat(stamps_ms, starts).tolist()
    for k, (i, lo, hi) in enumerate(owned):
        app = apps[i]
        if together and app.checker is None and app.taken is None and not app.buffers:
            segment = app.roller.take(totals[k], earliest[k], latest[k])
            if segment is not None:
                app.taken = _Taken(segment, lo, hi, totals[k])
                app.count_written(totals[k])
                continue
        app.add(table.slice(lo, hi - lo), sizes[lo:hi], stamps_ms[lo:hi])
    return _TaskRows(table, owner) if together else None


def append_batches(plan: PartitionPlan, batches: Iterable[pa.RecordBatch]) -> RangeResult:
    """Write records (Spark's Kafka schema, offset order) into segment files of the plan,
    a batch at a time."""
    app = _Appender(plan)
    for batch in batches:
        if batch.num_rows:
            _feed([app], pa.Table.from_batches([batch]),
                  np.zeros(batch.num_rows, dtype=np.int64))
    return _with_written([app], [app.result()])[0]


def append_ranges(plans: Sequence[PartitionPlan],
                  batches: Sequence[Sequence[pa.RecordBatch]]) -> list[RangeResult]:
    """:func:`append_batches` of each plan with its batches, the record rules applied to all
    of them together (for small ranges, read into memory)."""
    apps = [_Appender(plan) for plan in plans]
    counts = [sum(b.num_rows for b in mine) for mine in batches]
    rows = None
    if sum(counts):
        # One chunk: the ranges are slices of a few batches, and every compute call on
        # a table of many chunks pays per chunk.
        table = pa.Table.from_batches([b for mine in batches for b in mine if b.num_rows]) \
            .combine_chunks()
        rows = _feed(apps, table, np.repeat(np.arange(len(plans), dtype=np.int64), counts),
                     together=True)
    return _with_written(apps, _write_all(apps, rows), rows)
