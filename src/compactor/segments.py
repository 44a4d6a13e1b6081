"""Segments of a mirrored partition: the roll rules, and their state read from the Delta log.

A segment is the directory ``partition=P/segment=S`` of ``L/T/log``, where ``S`` is the offset
of its first record, as in Kafka. Every figure here is derived from the add actions of one
Delta snapshot (partition values, statistics, file names); nothing is kept on the side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable

from compactor.layout import INGEST_APP_ID, record_bytes_of


@dataclass(frozen=True)
class Segment:
    """One segment as the Delta log describes it."""

    partition: int
    base_offset: int
    last_offset: int
    records: int
    record_bytes: int
    size_bytes: int
    min_timestamp_ms: int
    max_timestamp_ms: int
    files: tuple[str, ...]

    def roll_deadline_ms(self, roll_ms: int) -> int:
        """When this segment counts as rolled even if nothing follows it."""
        return self.min_timestamp_ms + roll_ms


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

    @property
    def active(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    def writer_segment(self, roll_ms: int, now_ms: int) -> ActiveSegment | None:
        """The segment the next append continues, or None when it must start a new one.

        An active segment whose deadline passed while the partition was idle has rolled
        (the cleaner may already treat it as closed), so new records never join it.
        """
        active = self.active
        if active is None or now_ms - active.min_timestamp_ms > roll_ms:
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


def record_sizes(batch: pa.RecordBatch) -> list[int]:
    """Record bytes as ``segment.bytes`` counts them: key + value + header keys and values."""
    import pyarrow.compute as pc

    def lengths(arr: pa.Array) -> pa.Array:
        return pc.fill_null(pc.binary_length(arr), 0)

    total = pc.add(lengths(batch.column("key")), lengths(batch.column("value")))
    headers = batch.column("headers")
    if len(headers) and pc.sum(pc.fill_null(pc.list_value_length(headers), 0)).as_py():
        flat = pc.list_flatten(headers)
        per_header = pc.add(
            lengths(pc.struct_field(flat, "key").cast(pa.binary())),
            lengths(pc.struct_field(flat, "value")),
        )
        parents = pc.list_parent_indices(headers)
        sums = [0] * len(batch)
        for parent, size in zip(parents.to_pylist(), per_header.to_pylist(), strict=True):
            sums[parent] += size
        return [a + b for a, b in zip(total.to_pylist(), sums, strict=True)]
    return list(total.to_pylist())


@dataclass
class _Acc:
    last: int = -1
    records: int = 0
    record_bytes: int = 0
    size: int = 0
    min_ts: int | None = None
    max_ts: int | None = None
    files: list[str] = field(default_factory=list)


def _segments_from_actions(actions: pa.Table) -> dict[int, list[Segment]]:
    grouped: dict[tuple[int, int], _Acc] = {}
    cols = {name: actions.column(name).to_pylist() for name in actions.column_names}
    for i, path in enumerate(cols["path"]):
        key = (int(cols["partition.partition"][i]), int(cols["partition.segment"][i]))
        acc = grouped.setdefault(key, _Acc())
        size = int(cols["size_bytes"][i])
        acc.last = max(acc.last, int(cols["max.offset"][i]))
        acc.records += int(cols["num_records"][i])
        acc.record_bytes += record_bytes_of(str(path), size)
        acc.size += size
        acc.files.append(str(path))
        if cols["min.timestamp"][i] is not None:
            ms = _to_ms(cols["min.timestamp"][i])
            acc.min_ts = ms if acc.min_ts is None else min(acc.min_ts, ms)
        if cols["max.timestamp"][i] is not None:
            ms = _to_ms(cols["max.timestamp"][i])
            acc.max_ts = ms if acc.max_ts is None else max(acc.max_ts, ms)
    result: dict[int, list[Segment]] = {}
    for (partition, base), acc in sorted(grouped.items()):
        result.setdefault(partition, []).append(Segment(
            partition=partition, base_offset=base, last_offset=acc.last, records=acc.records,
            record_bytes=acc.record_bytes, size_bytes=acc.size,
            min_timestamp_ms=acc.min_ts or 0, max_timestamp_ms=acc.max_ts or 0,
            files=tuple(sorted(acc.files)),
        ))
    return result


def _to_ms(value: object) -> int:
    """Statistics timestamps arrive as datetimes; Kafka speaks epoch milliseconds."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return delta // dt.timedelta(milliseconds=1)
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"not a timestamp: {value!r}")


def read_partition_logs(
    table: DeltaTable, partitions: Iterable[int] | None = None
) -> Mapping[int, PartitionLog]:
    """Every partition's segments and committed ingest offset, from one snapshot of ``table``."""
    actions = pa.table(table.get_add_actions(flatten=True))
    by_partition = _segments_from_actions(actions) if actions.num_rows else {}
    wanted = set(by_partition) | set(partitions or ())
    logs: dict[int, PartitionLog] = {}
    for partition in sorted(wanted):
        version = table.transaction_version(INGEST_APP_ID.format(partition=partition))
        logs[partition] = PartitionLog(
            partition=partition,
            segments=tuple(by_partition.get(partition, ())),
            committed_offset=version,
        )
    return logs
