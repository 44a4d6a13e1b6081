"""Writing a micro-batch's log files of many partitions together.

A write task ends with one small file per partition with records; written one by one, each
file cost a Parquet writer's set-up, its own statistics pass and a temporary file. Here the
files of one log go through one Arrow dataset write and one statistics pass.
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
    order given.

    On a local disk, :data:`_TOGETHER_FROM` or more files of like compression go through one
    Arrow dataset write, each under a temporary name beside its final place, then renamed:
    one writer set-up per call instead of per file (a micro-batch writes one small file per
    partition with records). Otherwise (object storage, fewer files, parts of differing
    columns or two of one segment) one :func:`write_data_file` each.
    """
    together = is_local(log_root) and len(parts) >= _TOGETHER_FROM and all(
        p.table.num_rows and p.table.schema == parts[0].table.schema for p in parts) \
        and len({(p.partition, p.segment) for p in parts}) == len(parts)
    written: dict[int, WrittenFile] = {}
    for small in (True, False):
        chosen = [i for i, p in enumerate(parts) if (p.record_bytes < COMPRESS_FROM) is small]
        for at in range(0, len(chosen), _FILES_PER_WRITE):
            some = chosen[at:at + _FILES_PER_WRITE]
            if together and len(some) >= _TOGETHER_FROM:
                files = _write_together(log_root, [parts[i] for i in some])
            else:
                files = [_write_alone(log_root, parts[i], storage) for i in some]
            written.update(zip(some, files, strict=True))
    return [written[i] for i in range(len(parts))]


def _write_alone(log_root: str, part: LogPart, storage: Storage) -> WrittenFile:
    return write_data_file(log_root, f"partition={part.partition}/segment={part.segment}",
                           part.table, part.record_bytes, "log",
                           {"partition": str(part.partition), "segment": str(part.segment)},
                           storage=storage)


def _write_together(log_root: str, parts: Sequence[LogPart]) -> list[WrittenFile]:
    """One dataset write of ``parts`` (all small or all large, at most _FILES_PER_WRITE)."""
    counts = np.array([p.table.num_rows for p in parts], dtype=np.int64)
    table = pa.concat_tables([p.table for p in parts]).combine_chunks()
    keyed = table.append_column("partition", pa.array(
        np.repeat([p.partition for p in parts], counts).astype(np.int32))).append_column(
        "segment", pa.array(np.repeat([p.segment for p in parts], counts).astype(np.int64)))
    options = parquet_options(table.schema, parts[0].record_bytes)
    fmt = ds.ParquetFileFormat()
    token = uuid.uuid4().hex
    root = local_path(log_root)
    spooled: dict[tuple[int, int], str] = {}

    def visit(file: Any) -> None:
        directory = os.path.basename(os.path.dirname(file.path))
        partition_dir = os.path.basename(os.path.dirname(os.path.dirname(file.path)))
        spooled[int(partition_dir.split("=", 1)[1]), int(directory.split("=", 1)[1])] = \
            file.path

    try:
        ds.write_dataset(
            keyed, root, format=fmt, file_options=fmt.make_write_options(**options),
            partitioning=ds.partitioning(
                pa.schema([("partition", pa.int32()), ("segment", pa.int64())]),
                flavor="hive"),
            basename_template=f".tmp-{token}-{{i}}.parquet",
            existing_data_behavior="overwrite_or_ignore", preserve_order=True, use_threads=False,
            max_partitions=len(parts), max_open_files=len(parts) + 1,
            max_rows_per_group=max(1, table.num_rows), file_visitor=visit)
        if len(spooled) != len(parts):
            raise LakeError(f"{len(spooled)} data files written in {root} for {len(parts)} "
                            "segments")
        starts = [0, *np.cumsum(counts)[:-1].tolist()]
        out = []
        for p, stats in zip(parts, FileStats.of_groups(table, starts), strict=True):
            relative = f"partition={p.partition}/segment={p.segment}/" + \
                data_file_name(stats.lo["offset"], stats.hi["offset"], p.record_bytes)
            tmp = spooled.pop((p.partition, p.segment))
            size = os.path.getsize(tmp)
            os.replace(tmp, os.path.join(root, relative))
            out.append(WrittenFile("log", relative, size,
                                   {"partition": str(p.partition), "segment": str(p.segment)},
                                   stats.json(), stats.records, p.record_bytes,
                                   newest_ms=stats.hi.get("timestamp")))
        return out
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot write data files in {root}: {exc}") from exc
    finally:
        for tmp in spooled.values():
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
