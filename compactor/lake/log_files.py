"""Writing a micro-batch's log files of many partitions and topics together.

A write task ends with one small file per partition with records; written one by one, each
file cost a Parquet writer's set-up, its own statistics pass and a temporary file. Here the
files of every log a task wrote (one per topic) go through one Arrow dataset write and one
statistics pass.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from compactor.exceptions import LakeError
from compactor.lake.datafiles import (
    COMPRESS_FROM,
    FileStats,
    WrittenFile,
    parquet_options,
    write_data_file,
)
from compactor.lake.layout import data_file_name
from compactor.lake.storage import Storage, is_local, local_path


@dataclass(frozen=True)
class LogPart:
    """One log data file to write: a partition's rows of one segment, in offset order."""

    partition: int
    segment: int
    table: pa.Table  # the log's data columns, without partition and segment
    record_bytes: int


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
    ``partition=P/segment=S/``, in the order given.

    On a local disk, :data:`_TOGETHER_FROM` or more files of like compression go through one
    Arrow dataset write, whatever logs they belong to, each under a temporary name beside its
    final place, then renamed: one writer set-up per call instead of per file (a micro-batch
    writes one small file per partition with records, of every topic). Otherwise (object
    storage, fewer files, parts of differing columns or two of one segment of a log) one
    :func:`write_data_file` each.
    """
    together = len(parts) >= _TOGETHER_FROM and all(is_local(r) for r in {r for r, _ in parts}) \
        and all(p.table.num_rows and p.table.schema == parts[0][1].table.schema
                for _, p in parts) \
        and len({(r, p.partition, p.segment) for r, p in parts}) == len(parts)
    written: dict[int, WrittenFile] = {}
    for small in (True, False):
        chosen = [i for i, (_, p) in enumerate(parts) if (p.record_bytes < COMPRESS_FROM) is small]
        for at in range(0, len(chosen), _FILES_PER_WRITE):
            some = chosen[at:at + _FILES_PER_WRITE]
            if together and len(some) >= _TOGETHER_FROM:
                files = _write_together([parts[i] for i in some])
            else:
                files = [_write_alone(*parts[i], storage) for i in some]
            written.update(zip(some, files, strict=True))
    return [written[i] for i in range(len(parts))]


def _write_alone(log_root: str, part: LogPart, storage: Storage) -> WrittenFile:
    return write_data_file(log_root, f"partition={part.partition}/segment={part.segment}",
                           part.table, part.record_bytes, "log",
                           {"partition": str(part.partition), "segment": str(part.segment)},
                           storage=storage)


def _write_together(parts: Sequence[tuple[str, LogPart]]) -> list[WrittenFile]:
    """One dataset write of ``parts`` (all small or all large, at most _FILES_PER_WRITE),
    rooted where their logs' folders meet, one folder of it per file."""
    roots = [local_path(r) for r, _ in parts]
    base = os.path.commonpath(roots)
    folders = [os.path.relpath(os.path.join(root, f"partition={p.partition}/segment={p.segment}"),
                               base) for root, (_, p) in zip(roots, parts, strict=True)]
    counts = np.array([p.table.num_rows for _, p in parts], dtype=np.int64)
    table = pa.concat_tables([p.table for _, p in parts]).combine_chunks()
    keyed = table.append_column("folder", pa.array(folders, pa.string()).take(
        pa.array(np.repeat(np.arange(len(parts)), counts))))
    options = parquet_options(table.schema, parts[0][1].record_bytes)
    fmt = ds.ParquetFileFormat()
    token = uuid.uuid4().hex
    spooled: dict[str, str] = {}  # folder -> its temporary file

    def visit(file: Any) -> None:
        spooled[os.path.relpath(os.path.dirname(file.path), base)] = file.path

    try:
        ds.write_dataset(
            keyed, base, format=fmt, file_options=fmt.make_write_options(**options),
            # The folder's own slashes make its levels: no escaping of its value.
            partitioning=ds.DirectoryPartitioning(pa.schema([("folder", pa.string())]),
                                                  segment_encoding="none"),
            basename_template=f".tmp-{token}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore", preserve_order=True, use_threads=False,
            max_partitions=len(parts), max_open_files=len(parts) + 1,
            max_rows_per_group=max(1, table.num_rows), file_visitor=visit)
        if len(spooled) != len(parts):
            raise LakeError(f"{len(spooled)} data files written in {base} for {len(parts)} "
                            "segments")
        starts = [0, *np.cumsum(counts)[:-1].tolist()]
        out = []
        for root, folder, (_, p), stats in zip(roots, folders, parts,
                                               FileStats.of_groups(table, starts), strict=True):
            relative = f"partition={p.partition}/segment={p.segment}/" + \
                data_file_name(stats.lo["offset"], stats.hi["offset"], p.record_bytes)
            tmp = spooled.pop(folder)
            size = os.path.getsize(tmp)
            os.replace(tmp, os.path.join(root, relative))
            out.append(WrittenFile("log", relative, size,
                                   {"partition": str(p.partition), "segment": str(p.segment)},
                                   stats.json(), stats.records, p.record_bytes,
                                   newest_ms=stats.hi.get("timestamp")))
        return out
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot write data files in {base}: {exc}") from exc
    finally:
        for tmp in spooled.values():
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
