"""Writing the log's Parquet data files, shared by the ingest writer and the cleaner.

Every file is zstd Parquet named by :func:`compactor.layout.data_file_name`, and its Delta
statistics cover the non-PII columns only (``offset``, ``timestamp``, ``deleteHorizonMs``);
Parquet's own column statistics are limited the same way. A file of fewer than
:data:`COMPRESS_FROM` record bytes is uncompressed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from compactor.exceptions import LakeError
from compactor.lake.layout import data_file_name, join
from compactor.lake.segments import record_sizes
from compactor.lake.storage import Storage, is_local, local_path

NON_PII_STATS = ("offset", "timestamp", "deleteHorizonMs")
# DataFileBuilder gathers batches up to this many bytes into one row group.
WRITE_BYTES = 8 * 1024 * 1024
# A smaller file is written uncompressed: zstd does not shrink a few records, and it sets up
# a compressor per column of every file (a micro-batch writes one per partition with records).
COMPRESS_FROM = 16 * 1024


def parquet_options(schema: pa.Schema, record_bytes: int | None = None) -> dict[str, Any]:
    """The Parquet writer's settings of a data file of ``record_bytes`` (None: not known
    before it is written): statistics of non-PII columns only."""
    small = record_bytes is not None and record_bytes < COMPRESS_FROM
    return {"compression": "none" if small else "zstd",
            "write_statistics": [c for c in NON_PII_STATS if c in schema.names],
            "use_dictionary": ["topic"] if "topic" in schema.names else False}


@dataclass(frozen=True)
class WrittenFile:
    """A data file written but not yet committed."""

    table: str  # "log" or "rejected"
    path: str  # relative to the table root
    size: int
    partition_values: Mapping[str, str]
    stats: str
    records: int
    record_bytes: int
    # The write time to record, when not the commit's: a cleaned file keeps the latest write
    # time of the files it replaces, as Kafka keeps a cleaned segment's lastModified.
    modified_ms: int | None = None
    newest_ms: int | None = None  # the newest record timestamp it holds (None: no timestamp)
    # First and last offset, oldest and newest timestamp (ms) and earliest tombstone horizon
    # of its records as ``stats`` states them, where the writer kept them: a commit's
    # follower then need not parse ``stats``.
    span: tuple[int, int, int | None, int | None, int | None] | None = None


def add_action(f: WrittenFile, now_ms: int, data_change: bool = True) -> AddAction:
    """The Delta add action of a written file (its statistics already exclude PII).

    ``data_change=False`` for a rewrite that changes no record (segment consolidation)."""
    modified = f.modified_ms if f.modified_ms is not None else now_ms
    return AddAction(f.path, f.size, dict(f.partition_values), modified, data_change, f.stats)


def _iso_ms(ms: int) -> str | None:
    """Milliseconds since the epoch as Delta's timestamp statistic; None past year 9999."""
    try:
        return _iso_second(ms // 1000) + f".{ms % 1000:03d}Z"
    except OverflowError:
        return None


# A micro-batch's files' timestamps fall within a few seconds: each second is formatted once.
@functools.lru_cache(maxsize=4096)
def _iso_second(seconds: int) -> str:
    stamp = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    # Four digits of year, as Delta writes them (glibc's %Y drops the zeros before year 1000).
    return f"{stamp.year:04d}" + stamp.strftime("-%m-%dT%H:%M:%S")


def _bounds(column: pa.Array | pa.ChunkedArray) -> tuple[int, int] | None:
    """(min, max) of an integer column, None when every value is null."""
    if column.null_count == len(column):
        return None
    if column.null_count == 0:  # numpy: a fraction of a compute kernel call's overhead
        values = column.to_numpy()
        return int(values.min()), int(values.max())
    bounds = pc.min_max(column)
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())


def _to_ms(micros: int) -> int:
    """Microseconds to milliseconds, truncated toward zero."""
    return micros // 1000 if micros >= 0 else -(-micros // 1000)


class FileStats:
    """Running Delta statistics of the non-PII columns."""

    def __init__(self) -> None:
        self.records = 0
        self.lo: dict[str, int] = {}
        self.hi: dict[str, int] = {}
        self.nulls = {"offset": 0, "timestamp": 0, "deleteHorizonMs": 0}

    def add(self, table: pa.Table | pa.RecordBatch) -> None:
        if table.num_rows == 0:
            return
        self.records += table.num_rows
        columns = {
            "offset": table.column("offset"),
            "timestamp": table.column("timestamp").cast(pa.int64()),  # microseconds
        }
        if "deleteHorizonMs" in table.column_names:
            columns["deleteHorizonMs"] = table.column("deleteHorizonMs")
        else:
            self.nulls["deleteHorizonMs"] += table.num_rows
        for name, column in columns.items():
            self.nulls[name] += column.null_count
            bounds = _bounds(column)
            if bounds is None:
                continue
            low, high = bounds
            if name == "timestamp":  # truncated to ms, as Arrow's integer divide does
                low, high = _to_ms(low), _to_ms(high)
            self.lo[name] = low if name not in self.lo else min(self.lo[name], low)
            self.hi[name] = high if name not in self.hi else max(self.hi[name], high)

    @classmethod
    def of_groups(cls, table: pa.Table, starts: list[int]) -> list[FileStats]:
        """The statistics of each group of ``table``'s rows (groups start at ``starts``,
        ascending, the first at 0): for all groups at once when no offset or timestamp is
        null and no tombstone horizon is set (as a micro-batch writes them)."""
        ends = [*starts[1:], table.num_rows]
        offsets, stamps = table.column("offset"), table.column("timestamp")
        horizon = table.column("deleteHorizonMs")
        if offsets.null_count or stamps.null_count or horizon.null_count != len(horizon):
            out = []
            for start, end in zip(starts, ends, strict=True):
                stats = cls()
                stats.add(table.slice(start, end - start))
                out.append(stats)
            return out
        columns = {"offset": offsets.to_numpy(),
                   "timestamp": stamps.cast(pa.int64()).to_numpy()}  # microseconds
        lows = {n: np.minimum.reduceat(v, starts).tolist() for n, v in columns.items()}
        highs = {n: np.maximum.reduceat(v, starts).tolist() for n, v in columns.items()}
        out = []
        for g, (start, end) in enumerate(zip(starts, ends, strict=True)):
            stats = cls()
            stats.records = end - start
            stats.nulls["deleteHorizonMs"] = end - start
            stats.lo = {"offset": lows["offset"][g],
                        "timestamp": _to_ms(lows["timestamp"][g])}
            stats.hi = {"offset": highs["offset"][g],
                        "timestamp": _to_ms(highs["timestamp"][g])}
            out.append(stats)
        return out

    def json(self) -> str:
        """The statistics as ``json.dumps`` writes them, formatted directly: a micro-batch
        describes one file per partition with records. Their names need no escaping."""
        stamps = self._iso_timestamps()
        mins: list[str] = []
        maxs: list[str] = []
        for name in self.lo:
            if name == "timestamp":
                if stamps is None:
                    continue  # beyond what Delta's timestamp statistics can express
                mins.append(f'"{name}": "{stamps[0]}"')
                maxs.append(f'"{name}": "{stamps[1]}"')
            else:
                mins.append(f'"{name}": {int(self.lo[name])}')
                maxs.append(f'"{name}": {int(self.hi[name])}')
        nulls = ", ".join(f'"{name}": {int(n)}' for name, n in self.nulls.items())
        return (f'{{"numRecords": {int(self.records)}, "minValues": {{{", ".join(mins)}}}, '
                f'"maxValues": {{{", ".join(maxs)}}}, "nullCount": {{{nulls}}}}}')

    def span(self) -> tuple[int, int, int | None, int | None, int | None] | None:
        """First and last offset, oldest and newest timestamp (ms) and earliest tombstone
        horizon as :meth:`json` states them (None where it leaves one out); None without an
        offset."""
        if "offset" not in self.lo:
            return None
        dated = self._iso_timestamps() is not None
        return (self.lo["offset"], self.hi["offset"],
                self.lo["timestamp"] if dated else None,
                self.hi["timestamp"] if dated else None, self.lo.get("deleteHorizonMs"))

    def _iso_timestamps(self) -> tuple[str, str] | None:
        """The least and greatest timestamp as Delta states them; None when there is none or
        one lies beyond what Delta's timestamp statistics can express."""
        if "timestamp" not in self.lo:
            return None
        lo, hi = _iso_ms(self.lo["timestamp"]), _iso_ms(self.hi["timestamp"])
        return None if lo is None or hi is None else (lo, hi)


def file_stats(table: pa.Table) -> str:
    """Delta statistics for one file's rows (never key, value or headers)."""
    stats = FileStats()
    stats.add(table)
    return stats.json()


class DataFileBuilder:
    """Streams batches into one data file; named and described once it is complete.

    Batches are gathered up to :data:`WRITE_BYTES` and written as one row group: the cleaner
    hands over what it read file by file, and most of a mirror's files are small.

    The name holds the last offset, known only at the end, so the file is written under a
    temporary name first: beside its final place on a local disk (then renamed), in the
    local temporary directory for object storage (then uploaded once under its final name).
    """

    def __init__(self, table_root: str, directory: str, table: str = "log",
                 partition_values: Mapping[str, str] | None = None, *,
                 storage: Storage) -> None:
        self._root = table_root
        self._directory = directory
        self._table = table
        self._partition_values = dict(partition_values or {})
        self._storage = storage
        spool = f".tmp-{uuid.uuid4().hex}.parquet"
        if is_local(table_root):
            self._tmp = os.path.join(local_path(table_root), directory, spool)
        else:
            self._tmp = os.path.join(tempfile.gettempdir(), f"compactor{spool}")
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[tuple[pa.Table, int | None]] = []  # not yet written, record bytes
        self._pending_bytes = 0
        self._stats = FileStats()
        self._record_bytes = 0

    def write(self, batch: pa.Table | pa.RecordBatch, record_bytes: int | None = None) -> None:
        """Add ``batch`` (its records' bytes counted from its rows when None) to the file; an
        error of the disk is a LakeError, the file removed."""
        try:
            self._write(batch, record_bytes)
        except (OSError, pa.ArrowException) as exc:
            self.abort()
            raise LakeError(f"cannot write a data file in {os.path.dirname(self._tmp)}: "
                            f"{exc}") from exc

    def _write(self, batch: pa.Table | pa.RecordBatch, record_bytes: int | None) -> None:
        if batch.num_rows == 0:
            return
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if self._writer is None:  # the file is there from the first batch on
            os.makedirs(os.path.dirname(self._tmp), exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp, table.schema,
                                            **parquet_options(table.schema))
        if self._pending and table.schema != self._pending[0][0].schema:
            self._flush()  # the writer refuses it, as it would have unbuffered
        self._pending.append((table, record_bytes))
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= WRITE_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Write the gathered batches as one row group: a row group, its statistics and its
        record sizes per small batch cost more than the batch."""
        if not self._pending:
            return
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        table = pa.concat_tables([t for t, _ in pending]).combine_chunks()
        assert self._writer is not None  # made with the first batch
        self._writer.write_table(table)
        self._stats.add(table)
        self._record_bytes += sum(n for _, n in pending if n is not None)
        uncounted = [t for t, n in pending if n is None]
        if uncounted:
            self._record_bytes += int(record_sizes(pa.concat_tables(uncounted)).sum())

    def close(self) -> WrittenFile | None:
        """Finish the file; None when no row was written (nothing is left on disk)."""
        try:
            self._flush()
            if self._writer is None:
                return None
            self._writer.close()
        except (OSError, pa.ArrowException) as exc:
            self.abort()
            raise LakeError(f"cannot write a data file in {os.path.dirname(self._tmp)}: "
                            f"{exc}") from exc
        name = data_file_name(self._stats.lo["offset"], self._stats.hi["offset"],
                              self._record_bytes)
        relative = f"{self._directory}/{name}" if self._directory else name
        size = os.path.getsize(self._tmp)
        if is_local(self._root):
            final = os.path.join(local_path(self._root), relative)
            try:
                os.replace(self._tmp, final)
            except OSError as exc:
                self.abort()
                raise LakeError(f"cannot write data file {final}: {exc}") from exc
        else:
            self._upload(relative)
        return WrittenFile(self._table, relative, size, self._partition_values,
                           self._stats.json(), self._stats.records, self._record_bytes,
                           newest_ms=self._stats.hi.get("timestamp"))

    def _upload(self, relative: str) -> None:
        fs, path = self._storage.filesystem(join(self._root, relative))
        try:
            # Through Arrow's own copy: delta-rs's stream takes bytes, not what
            # NativeFile.write hands it from Python.
            pafs.copy_files(self._tmp, path, source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=fs)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot upload data file {join(self._root, relative)}: {exc}") \
                from exc
        finally:
            os.remove(self._tmp)

    def abort(self) -> None:
        """Drop the file: nothing of it stays on disk, whatever state the writer is in."""
        writer, self._writer = self._writer, None
        self._pending, self._pending_bytes = [], 0
        with contextlib.suppress(OSError, pa.ArrowException):  # the disk may be what failed
            if writer is not None:
                writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._tmp)


def write_data_file(table_root: str, directory: str, table: pa.Table, record_bytes: int,
                    kind: str = "log", partition_values: Mapping[str, str] | None = None,
                    *, storage: Storage) -> WrittenFile:
    """Write one complete table as one data file.

    On a local disk the file is made in memory and written once, beside its final place under
    a temporary name, then renamed: a micro-batch writes one such small file per partition
    with records, and a Parquet writer on a file costs more than the file's bytes.
    """
    if table.num_rows == 0:
        raise LakeError(f"refusing to write an empty data file under {table_root}/{directory}")
    if not is_local(table_root):
        builder = DataFileBuilder(table_root, directory, kind, partition_values, storage=storage)
        builder.write(table, record_bytes)
        written = builder.close()
        assert written is not None  # the table has rows
        return written
    stats = FileStats()
    stats.add(table)
    name = data_file_name(stats.lo["offset"], stats.hi["offset"], record_bytes)
    relative = f"{directory}/{name}" if directory else name
    final = os.path.join(local_path(table_root), relative)
    sink = pa.BufferOutputStream()
    try:
        pq.write_table(table, sink, **parquet_options(table.schema, record_bytes))
        data = sink.getvalue()
        place(final, data)
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot write a data file in {os.path.dirname(final)}: {exc}") \
            from exc
    return WrittenFile(kind, relative, data.size, dict(partition_values or {}), stats.json(),
                       stats.records, record_bytes, newest_ms=stats.hi.get("timestamp"))


def write_new(final: str, data: bytes) -> None:
    """Create the file ``final`` holding ``data``, the directory made when missing; a file
    already under that name is an error (FileExistsError).

    Written in place, not through a temporary name: a data file's name is unique (its random
    part), no commit refers to it before its task returns, and a file a killed task left half
    written is an orphan that the full vacuum deletes (as it deletes temporary files)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(final, flags, 0o666)
    except FileNotFoundError:  # the segment's first file
        os.makedirs(os.path.dirname(final), exist_ok=True)
        fd = os.open(final, flags, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.remove(final)
        raise
    os.close(fd)


def place(final: str, data: bytes | pa.Buffer) -> None:
    """Write ``data`` to ``final`` through a temporary file beside it, so that the name never
    shows a partial file; the directory is made when missing."""
    tmp = os.path.join(os.path.dirname(final), f".tmp-{uuid.uuid4().hex}.parquet")
    try:
        out = open(tmp, "wb")  # noqa: SIM115 (closed below, before the rename)
    except FileNotFoundError:  # the segment's first file
        os.makedirs(os.path.dirname(final), exist_ok=True)
        out = open(tmp, "wb")  # noqa: SIM115
    try:
        with out:
            out.write(memoryview(data))
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
