"""Segments of a mirrored partition: the roll rules, and their state read from the Delta log.

A segment is the directory ``partition=P/segment=S`` of ``L/T/log``, where ``S`` is the offset
of its first record, as in Kafka. Every figure here is derived from the add actions of one
Delta snapshot (partition values, statistics, file names); nothing is kept on the side.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from deltalake import DeltaTable

from compactor.lake.layout import record_bytes_of
from compactor.positions import CLEANER, INGEST


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of the log, as its add action describes it."""

    path: str
    partition: int
    segment: int
    first_offset: int
    last_offset: int
    records: int
    record_bytes: int
    size_bytes: int
    min_timestamp_ms: int | None
    max_timestamp_ms: int | None
    min_delete_horizon_ms: int | None  # earliest tombstone horizon stamped by the cleaner
    modified_ms: int | None = None  # the add action's modificationTime (the write time)


@dataclass(frozen=True)
class Segment:
    """One segment: the files under ``partition=P/segment=S``, in offset order."""

    partition: int
    base_offset: int
    files: tuple[DataFile, ...]

    @functools.cached_property
    def last_offset(self) -> int:
        return max(f.last_offset for f in self.files)

    @functools.cached_property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @functools.cached_property
    def record_bytes(self) -> int:
        return sum(f.record_bytes for f in self.files)

    @functools.cached_property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @functools.cached_property
    def min_timestamp_ms(self) -> int:
        stamps = [f.min_timestamp_ms for f in self.files if f.min_timestamp_ms is not None]
        return min(stamps, default=0)

    @functools.cached_property
    def max_timestamp_ms(self) -> int:
        stamps = [f.max_timestamp_ms for f in self.files if f.max_timestamp_ms is not None]
        return max(stamps, default=0)

    @functools.cached_property
    def written_max_timestamp_ms(self) -> int:
        """The largest timestamp, none later than when its file was written: a record dated
        ahead of the mirror's clock counts as written then (for min.compaction.lag.ms)."""
        stamps = [f.max_timestamp_ms if f.modified_ms is None
                  else min(f.max_timestamp_ms, f.modified_ms)
                  for f in self.files if f.max_timestamp_ms is not None]
        return max(stamps, default=0)

    @functools.cached_property
    def min_delete_horizon_ms(self) -> int | None:
        horizons = [f.min_delete_horizon_ms for f in self.files
                    if f.min_delete_horizon_ms is not None]
        return min(horizons, default=None)

    def roll_deadline_ms(self, roll_ms: int) -> int:
        """When this segment counts as rolled even if nothing follows it."""
        return self.min_timestamp_ms + roll_ms

    def rolled_by(self, roll_ms: int, now_ms: int) -> bool:
        """Past its deadline by the wall clock: closed for the writer and the cleaner alike."""
        return now_ms > self.roll_deadline_ms(roll_ms)


@dataclass(frozen=True)
class ActiveSegment:
    """What the writer needs to know of the segment it appends to."""

    base_offset: int
    first_timestamp_ms: int
    record_bytes: int


@dataclass(frozen=True)
class PartitionLog:
    """Segments of one partition, oldest first, and the last offset ingest committed."""

    partition: int
    segments: tuple[Segment, ...]
    committed_offset: int | None
    cleaner_offset: int | None = None  # the cleaner checkpoint: first dirty offset

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset if self.segments else 0

    @property
    def log_end_offset(self) -> int:
        """The next offset after the last record the lake holds (or has committed)."""
        last = self.segments[-1].last_offset if self.segments else -1
        return max(last, self.committed_offset if self.committed_offset is not None else -1) + 1

    @property
    def active(self) -> Segment | None:
        """The last segment, unless the cleaner has covered part of it.

        The cleaner only covers closed segments, and a segment closed once stays closed
        (Kafka never reopens a rolled segment), even though dropping its earliest records
        moved its earliest timestamp, and so its time-roll deadline, later.
        """
        if not self.segments:
            return None
        last = self.segments[-1]
        if self.cleaner_offset is not None and last.base_offset < self.cleaner_offset:
            return None
        return last

    def writer_segment(self, roll_ms: int, now_ms: int) -> ActiveSegment | None:
        """The segment the next append continues, or None when it must start a new one.

        An active segment whose deadline passed while the partition was idle has rolled
        (the cleaner may already treat it as closed), so new records never join it.
        """
        active = self.active
        if active is None or active.rolled_by(roll_ms, now_ms):
            return None
        return ActiveSegment(active.base_offset, active.min_timestamp_ms, active.record_bytes)


class SegmentRoller:
    """Assigns each appended record to a segment by Kafka's roll rules.

    A record starts a new segment when there is no active segment, when it would carry the
    active segment past ``segment.bytes`` (a segment always takes at least one record), or when
    its timestamp is more than ``roll_ms`` (segment.ms, or KIP-354's min(segment.ms,
    max.compaction.lag.ms)) after the segment's earliest timestamp.
    """

    def __init__(self, active: ActiveSegment | None, segment_bytes: int, roll_ms: int) -> None:
        self._segment_bytes = segment_bytes
        self._roll_ms = roll_ms
        self._base = active.base_offset if active else None
        self._first_ts = active.first_timestamp_ms if active else 0
        self._bytes = active.record_bytes if active else 0

    def assign_batch(self, offsets: npt.NDArray[np.int64], timestamps_ms: npt.NDArray[np.int64],
                     sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """:meth:`assign` for numpy arrays, without a Python loop when nothing rolls.

        That is the common case (a micro-batch is far smaller than a segment); a batch in
        which some record rolls goes through :meth:`assign`.
        """
        n = len(offsets)
        if n and self._base is not None:
            used_before = self._bytes + np.concatenate(([0], np.cumsum(sizes)[:-1]))
            by_size = (used_before > 0) & (used_before + sizes > self._segment_bytes)
            earliest = np.minimum.accumulate(np.concatenate(([self._first_ts],
                                                             timestamps_ms[:-1])))
            by_time = timestamps_ms - earliest > self._roll_ms
            if not (by_size.any() or by_time.any()):
                self._first_ts = int(min(self._first_ts, int(timestamps_ms.min())))
                self._bytes = int(used_before[-1] + sizes[-1])
                return np.full(n, self._base, dtype=np.int64)
        return np.array(self.assign(offsets.tolist(), timestamps_ms.tolist(), sizes.tolist()),
                        dtype=np.int64)

    def take(self, record_bytes: int, earliest_ms: int, latest_ms: int) -> int | None:
        """The active segment's base offset if records of ``record_bytes`` in all, with
        timestamps from ``earliest_ms`` to ``latest_ms``, all go to it (then they are counted
        in it); None, nothing counted, when one of them might roll (:meth:`assign_batch`
        decides). No record rolls when the active segment holds them all within
        ``segment.bytes`` and no timestamp is more than ``roll_ms`` after its earliest."""
        if self._base is None or self._bytes + record_bytes > self._segment_bytes \
                or latest_ms - min(self._first_ts, earliest_ms) > self._roll_ms:
            return None
        self._first_ts = min(self._first_ts, earliest_ms)
        self._bytes += record_bytes
        return self._base

    def assign(
        self, offsets: Sequence[int], timestamps_ms: Sequence[int], sizes: Sequence[int]
    ) -> list[int]:
        """Segment base offset for each record, in order."""
        out: list[int] = []
        base, first_ts, used = self._base, self._first_ts, self._bytes
        limit, roll_ms = self._segment_bytes, self._roll_ms
        for offset, ts, size in zip(offsets, timestamps_ms, sizes, strict=True):
            if (
                base is None
                or (used > 0 and used + size > limit)
                or ts - first_ts > roll_ms
            ):
                base, first_ts, used = offset, ts, 0
            elif ts < first_ts:
                first_ts = ts
            used += size
            out.append(base)
        self._base, self._first_ts, self._bytes = base, first_ts, used
        return out


def record_sizes(batch: pa.RecordBatch | pa.Table) -> npt.NDArray[np.int64]:
    """Record bytes as ``segment.bytes`` counts them: key + value + header keys and values."""
    import pyarrow.compute as pc

    def lengths(arr: pa.Array) -> npt.NDArray[np.int64]:
        counted = pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False)
        return np.asarray(counted, dtype=np.int64)

    total = lengths(batch.column("key")) + lengths(batch.column("value"))
    headers = batch.column("headers")
    if len(headers) and pc.sum(pc.fill_null(pc.list_value_length(headers), 0)).as_py():
        flat = pc.list_flatten(headers)
        per_header = (lengths(pc.struct_field(flat, "key").cast(pa.binary()))
                      + lengths(pc.struct_field(flat, "value")))
        parents = pc.list_parent_indices(headers).to_numpy(zero_copy_only=False)
        total += np.bincount(parents, weights=per_header, minlength=len(batch)).astype(np.int64)
    return total


def _column(cols: Mapping[str, list[object]], name: str, n: int) -> list[object]:
    """A statistics column; absent when no file has a value for it."""
    return cols.get(name) or [None] * n


def data_file(path: str, size: int, partition: int, segment: int, first_offset: int,
              last_offset: int, records: int, min_ts_ms: int | None, max_ts_ms: int | None,
              min_delete_horizon_ms: int | None, modified_ms: int | None,
              record_bytes: int | None = None) -> DataFile:
    """A :class:`DataFile` from one add action's fields (a snapshot's or a commit file's);
    ``record_bytes``, when its writer knows them, else read from its name."""
    return DataFile(
        path=path, partition=partition, segment=segment, first_offset=first_offset,
        last_offset=last_offset, records=records,
        record_bytes=record_bytes if record_bytes is not None else record_bytes_of(path, size),
        size_bytes=size,
        min_timestamp_ms=_dated(min_ts_ms, max_ts_ms, modified_ms, lowest=True),
        max_timestamp_ms=_dated(min_ts_ms, max_ts_ms, modified_ms, lowest=False),
        min_delete_horizon_ms=min_delete_horizon_ms, modified_ms=modified_ms,
    )


def _iso_ms(value: object) -> int | None:
    """A timestamp statistic (ISO 8601, or a number of milliseconds) in milliseconds."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    text = str(value)
    if len(text) == 24 and text[19] == "." and text[23] == "Z" and text[20:23].isdigit():
        return _second_ms(text[:19]) + int(text[20:23])  # as this writer formats them
    year, dash, rest = text.partition("-")
    if dash and year.isdigit() and len(year) < 4:  # an older writer's year before 1000
        text = f"{year.zfill(4)}-{rest}"
    stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return (stamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
        milliseconds=1)


def file_from_add(add: dict[str, Any]) -> DataFile:
    """A DataFile from a commit file's add action, as ``get_add_actions`` would give it."""
    values = add["partitionValues"]
    stats = json.loads(add.get("stats") or "{}")
    mins, maxs = stats.get("minValues", {}), stats.get("maxValues", {})
    horizon = mins.get("deleteHorizonMs")
    modified = add.get("modificationTime")
    return data_file(
        unquote(add["path"]), int(add["size"]), int(values["partition"]), int(values["segment"]),
        int(mins["offset"]), int(maxs["offset"]), int(stats["numRecords"]),
        _iso_ms(mins.get("timestamp")), _iso_ms(maxs.get("timestamp")),
        None if horizon is None else int(horizon),
        None if modified is None else int(modified),
    )


# A commit's files' timestamps fall within a few seconds: each second is parsed once.
@functools.lru_cache(maxsize=4096)
def _second_ms(text: str) -> int:
    stamp = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    return (stamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)


def _files_from_actions(actions: pa.Table) -> list[DataFile]:
    cols = {name: actions.column(name).to_pylist() for name in actions.column_names}
    n = actions.num_rows
    min_ts, max_ts = _column(cols, "min.timestamp", n), _column(cols, "max.timestamp", n)
    horizon = _column(cols, "min.deleteHorizonMs", n)
    modified = _column(cols, "modification_time", n)
    return [
        data_file(
            str(path), _as_int(cols["size_bytes"][i]), _as_int(cols["partition.partition"][i]),
            _as_int(cols["partition.segment"][i]), _as_int(cols["min.offset"][i]),
            _as_int(cols["max.offset"][i]), _as_int(cols["num_records"][i]),
            None if min_ts[i] is None else _to_ms(min_ts[i]),
            None if max_ts[i] is None else _to_ms(max_ts[i]),
            None if horizon[i] is None else _as_int(horizon[i]),
            None if modified[i] is None else _to_ms(modified[i]),
        )
        for i, path in enumerate(cols["path"])
    ]


def _dated(lo: int | None, hi: int | None, written: int | None, lowest: bool) -> int | None:
    """A file's earliest or latest record time, where a record without a timestamp (negative:
    Kafka's -1, message format v0) counts as written when its file was, as Kafka falls back
    to a segment file's modification time for rolls, retention and the compaction lag."""
    if lo is None or hi is None or written is None or lo >= 0:
        return lo if lowest else hi
    if hi < 0:  # no record of the file has a timestamp
        return written
    return min(hi, written) if lowest else max(hi, written)


def _segments(files: Iterable[DataFile]) -> dict[int, list[Segment]]:
    grouped: dict[tuple[int, int], list[DataFile]] = {}
    for f in files:
        grouped.setdefault((f.partition, f.segment), []).append(f)
    result: dict[int, list[Segment]] = {}
    for (partition, base), members in sorted(grouped.items()):
        members.sort(key=lambda f: f.first_offset)
        result.setdefault(partition, []).append(Segment(partition, base, tuple(members)))
    return result


def _as_int(value: object) -> int:
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"not a number: {value!r}")


def _to_ms(value: object) -> int:
    """Statistics timestamps arrive as datetimes; Kafka speaks epoch milliseconds."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return delta // dt.timedelta(milliseconds=1)
    return _as_int(value)


def partition_logs(files: Iterable[DataFile], txn: Callable[[str], int | None],
                   partitions: Iterable[int] | None = None) -> dict[int, PartitionLog]:
    """Every partition's segments and positions; ``txn`` reads an app transaction's version."""
    by_partition = _segments(files)
    wanted = set(by_partition) | set(partitions or ())
    return {
        partition: PartitionLog(
            partition=partition,
            segments=tuple(by_partition.get(partition, ())),
            committed_offset=txn(INGEST.id(partition)),
            cleaner_offset=txn(CLEANER.id(partition)),
        )
        for partition in sorted(wanted)
    }


def read_partition_logs(
    table: DeltaTable, partitions: Iterable[int] | None = None,
    position: Callable[[str], int | None] | None = None,
) -> Mapping[int, PartitionLog]:
    """Every partition's segments and positions, from one snapshot of ``table``.

    Reads every add action: for one-off readers. A long-running process follows the log
    with :mod:`compactor.lake.log_follower` instead. ``position``: the snapshot's app
    transactions read at once (:mod:`compactor.lake.app_transactions`); default delta-rs's.
    """
    actions = pa.table(table.get_add_actions(flatten=True))
    files = _files_from_actions(actions) if actions.num_rows else []
    return partition_logs(files, position or table.transaction_version, partitions)
