"""Writing a micro-batch's log files of many partitions and topics together.

A write task ends with one small file per partition with records; written one by one, each
file cost a Parquet writer's set-up, its own statistics pass and a temporary file. Here the
files of every log a task wrote (one per topic) are made together, with one statistics pass:
the small ones encoded in one pass by :mod:`compactor.lake.parquet_encoder`, the large ones
through one Arrow dataset write.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from compactor.exceptions import LakeError
from compactor.lake.datafiles import (
    COMPRESS_FROM,
    NON_PII_STATS,
    FileStats,
    WrittenFile,
    parquet_options,
    write_data_file,
    write_new,
)
from compactor.lake.layout import data_file_name
from compactor.lake.parquet_encoder import encodable, encode_files
from compactor.lake.storage import Storage, is_local, local_path


@dataclass(frozen=True)
class LogPart:
    """One log data file to write: a partition's rows of one segment, in offset order."""

    partition: int
    segment: int
    table: pa.Table  # the log's data columns, without partition and segment
    record_bytes: int


@dataclass(frozen=True)
class LogGroup:
    """One log data file to write, its rows the next ``rows`` of the tables it is given with
    (:func:`write_log_rows`)."""

    log_root: str
    partition: int
    segment: int
    rows: int
    record_bytes: int


# Fewer small files are written one at a time: the encoder's pass over the columns costs as
# much as a few files from Arrow's writer.
_ENCODE_FROM = 3
# The most files one dataset write holds open at once.
_FILES_PER_WRITE = 512
# Fewer files are written one at a time: a dataset write's set-up (an Arrow execution plan)
# costs as much as several small files.
_TOGETHER_FROM = 16


def write_log_files(log_root: str, parts: Sequence[LogPart], *,
                    storage: Storage) -> list[WrittenFile]:
    """Write each part as one data file of the log under ``partition=P/segment=S/``, in the
    order given (:func:`write_logs` for one log)."""
    return write_logs([(log_root, part) for part in parts], storage=storage)


def write_logs(parts: Sequence[tuple[str, LogPart]], *, storage: Storage) -> list[WrittenFile]:
    """Write each (log root, part) as one data file of that log under
    ``partition=P/segment=S/``, in the order given (:func:`write_log_rows`)."""
    return write_log_rows(
        [p.table for _, p in parts],
        [LogGroup(root, p.partition, p.segment, p.table.num_rows, p.record_bytes)
         for root, p in parts], storage=storage)


def write_log_rows(tables: Sequence[pa.Table], groups: Sequence[LogGroup], *,
                   storage: Storage) -> list[WrittenFile]:
    """Write each group as one data file of its log under ``partition=P/segment=S/``, in the
    order given: the groups take the rows of ``tables`` (the log's data columns, without
    partition and segment) one after another, a group's rows all in one table.

    On a local disk, :data:`_ENCODE_FROM` or more small files (under COMPRESS_FROM record
    bytes, uncompressed) are encoded together
    (:func:`compactor.lake.parquet_encoder.encode_files`), whatever logs they belong to, and
    each is written once under its final name; :data:`_TOGETHER_FROM` or more large ones go
    through one Arrow dataset write, each under a temporary name beside its final place, then
    renamed. A micro-batch writes one small file per partition with records, of every topic,
    and a writer's set-up per file would cost more than the files. Otherwise (object storage,
    fewer large files, tables of differing columns or two groups of one segment of a log)
    one :func:`write_data_file` each.
    """
    if sum(g.rows for g in groups) != sum(t.num_rows for t in tables):
        raise LakeError(f"{len(groups)} log files to write do not hold the "
                        f"{sum(t.num_rows for t in tables)} rows given")
    same = all(t.schema == tables[0].schema for t in tables)
    local = same and all(is_local(r) for r in {g.log_root for g in groups}) \
        and all(g.rows for g in groups)
    together = local and len(groups) >= _TOGETHER_FROM \
        and len({(g.log_root, g.partition, g.segment) for g in groups}) == len(groups)
    own = list(_group_tables(tables, groups))

    def rows_of(chosen: list[int]) -> pa.Table:
        """The rows of the ``chosen`` groups, in their order."""
        return (pa.concat_tables(tables) if len(chosen) == len(groups)
                else pa.concat_tables([own[i] for i in chosen]))

    written: dict[int, WrittenFile] = {}
    for small in (True, False):
        chosen = [i for i, g in enumerate(groups) if (g.record_bytes < COMPRESS_FROM) is small]
        if small and local and len(chosen) >= _ENCODE_FROM and encodable(tables[0].schema):
            written.update(zip(chosen, _write_encoded(rows_of(chosen),
                                                      [groups[i] for i in chosen]), strict=True))
            continue
        for at in range(0, len(chosen), _FILES_PER_WRITE):
            some = chosen[at:at + _FILES_PER_WRITE]
            if together and len(some) >= _TOGETHER_FROM:
                files = _write_together(rows_of(some), [groups[i] for i in some])
            else:
                files = [_write_alone(groups[i], own[i], storage) for i in some]
            written.update(zip(some, files, strict=True))
    return [written[i] for i in range(len(groups))]


def _group_tables(tables: Sequence[pa.Table], groups: Sequence[LogGroup]) -> Iterator[pa.Table]:
    """Each group's rows, a slice of its table."""
    at, rows = 0, 0  # the table, the rows of it taken
    for g in groups:
        while at < len(tables) and rows == tables[at].num_rows and g.rows:
            at, rows = at + 1, 0
        if g.rows and (at == len(tables) or rows + g.rows > tables[at].num_rows):
            raise LakeError(f"the rows of partition {g.partition} segment {g.segment} of "
                            f"{g.log_root} are not all in one table")
        yield tables[at].slice(rows, g.rows) if g.rows else tables[0].slice(0, 0)
        rows += g.rows


def _write_alone(group: LogGroup, table: pa.Table, storage: Storage) -> WrittenFile:
    return write_data_file(group.log_root, f"partition={group.partition}/segment={group.segment}",
                           table, group.record_bytes, "log",
                           {"partition": str(group.partition), "segment": str(group.segment)},
                           storage=storage)


def _write_encoded(table: pa.Table, groups: Sequence[LogGroup]) -> list[WrittenFile]:
    """``table``'s rows as ``groups`` (all small, all on local disks), encoded together, each
    file written once under its final name (:func:`~compactor.lake.datafiles.write_new`)."""
    starts = [0, *np.cumsum([g.rows for g in groups])[:-1].tolist()]
    try:
        encoded = encode_files(table, starts, NON_PII_STATS)
    except pa.ArrowException as exc:
        raise LakeError(f"cannot encode {len(groups)} data files of "
                        f"{groups[0].log_root}: {exc}") from exc
    out = []
    for g, data, stats in zip(groups, encoded, FileStats.of_groups(table, starts), strict=True):
        relative = _relative(g, stats)
        final = f"{local_path(g.log_root)}/{relative}"
        try:
            write_new(final, data)
        except OSError as exc:
            raise LakeError(f"cannot write data file {final}: {exc}") from exc
        out.append(_written(g, relative, len(data), stats))
    return out


def _relative(group: LogGroup, stats: FileStats) -> str:
    """A group's data file name, under its segment's folder."""
    return f"partition={group.partition}/segment={group.segment}/" + \
        data_file_name(stats.lo["offset"], stats.hi["offset"], group.record_bytes)


def _written(group: LogGroup, relative: str, size: int, stats: FileStats) -> WrittenFile:
    """A group's data file, written, as the commit takes it."""
    return WrittenFile("log", relative, size,
                       {"partition": str(group.partition), "segment": str(group.segment)},
                       stats.json(), stats.records, group.record_bytes,
                       newest_ms=stats.hi.get("timestamp"), span=stats.span())


def _write_together(table: pa.Table, groups: Sequence[LogGroup]) -> list[WrittenFile]:
    """One dataset write of ``table``'s rows as ``groups`` (all small or all large, at most
    _FILES_PER_WRITE), rooted where their logs' folders meet, one folder of it per file."""
    roots = {g.log_root: local_path(g.log_root) for g in groups}
    base = os.path.commonpath(list(roots.values()))
    under = {root: os.path.relpath(path, base) for root, path in roots.items()}
    folders = [os.path.normpath(f"{under[g.log_root]}/partition={g.partition}/"
                                f"segment={g.segment}") for g in groups]
    counts = np.array([g.rows for g in groups], dtype=np.int64)
    table = table.combine_chunks()
    keyed = table.append_column("folder", pa.array(folders, pa.string()).take(
        pa.array(np.repeat(np.arange(len(groups)), counts))))
    options = parquet_options(table.schema, groups[0].record_bytes)
    fmt = ds.ParquetFileFormat()
    token = uuid.uuid4().hex
    spooled: dict[str, tuple[str, int]] = {}  # folder -> its temporary file, its size

    def visit(file: Any) -> None:
        spooled[os.path.relpath(os.path.dirname(file.path), base)] = (file.path, file.size)

    try:
        ds.write_dataset(
            keyed, base, format=fmt, file_options=fmt.make_write_options(**options),
            # The folder's own slashes make its levels: no escaping of its value.
            partitioning=ds.DirectoryPartitioning(pa.schema([("folder", pa.string())]),
                                                  segment_encoding="none"),
            basename_template=f".tmp-{token}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore", preserve_order=True, use_threads=False,
            max_partitions=len(groups), max_open_files=len(groups) + 1,
            max_rows_per_group=max(1, table.num_rows), file_visitor=visit)
        if len(spooled) != len(groups):
            raise LakeError(f"{len(spooled)} data files written in {base} for {len(groups)} "
                            "segments")
        starts = [0, *np.cumsum(counts)[:-1].tolist()]
        out = []
        for g, folder, stats in zip(groups, folders, FileStats.of_groups(table, starts),
                                    strict=True):
            relative = _relative(g, stats)
            tmp, size = spooled.pop(folder)
            os.replace(tmp, f"{roots[g.log_root]}/{relative}")
            out.append(_written(g, relative, size, stats))
        return out
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot write data files in {base}: {exc}") from exc
    finally:
        for tmp, _ in spooled.values():
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
