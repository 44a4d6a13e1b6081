"""Segment consolidation: a segment's many micro-batch files become one, no record changed.

Kafka keeps one file per segment; a mirror appends one file per partition per micro-batch
(86,400 a day at a 1 s trigger). So once a segment rolls, the cleaner's partition task rewrites
its files as one file, in offset order, every record, offset, timestamp, header and tombstone
horizon as it was, for every cleanup policy; and while the active segment collects more than
:data:`ACTIVE_MERGE_FILES` small files, consecutive runs of them become one. The rewrite rides
in the partition's cleaning commit (see :mod:`compactor.cleaner.maintenance`), its remove and
add actions marked ``dataChange=false`` so that Delta readers know no data changed.

A segment the same pass compacts or expires is not merged: its rewrite already makes it one
file, or it goes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from compactor.lake.datafiles import DataFileBuilder, WrittenFile
from compactor.lake.segments import DataFile, Segment
from compactor.lake.storage import Storage

# The active segment is merged once it holds this many files smaller than ACTIVE_SMALL_BYTES;
# larger files stay as they are, so a segment near segment.bytes is not rewritten again and
# again for a few new files.
ACTIVE_MERGE_FILES = 16
ACTIVE_SMALL_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class MergeRun:
    """Files of one segment, consecutive in offset order, to be rewritten as one."""

    segment: int
    files: tuple[DataFile, ...]


def merge_runs(segments: Iterable[Segment], active: Segment | None) -> list[MergeRun]:
    """What a pass merges: every closed segment of several files whole; in the active one,
    runs of consecutive small files once there are enough of them."""
    runs: list[MergeRun] = []
    for seg in segments:
        files = sorted(seg.files, key=lambda f: f.first_offset)
        if seg is not active:
            if len(files) > 1:
                runs.append(MergeRun(seg.base_offset, tuple(files)))
            continue
        if sum(f.size_bytes < ACTIVE_SMALL_BYTES for f in files) < ACTIVE_MERGE_FILES:
            continue
        run: list[DataFile] = []
        for f in [*files, None]:
            if f is not None and f.size_bytes < ACTIVE_SMALL_BYTES:
                run.append(f)
                continue
            if len(run) > 1:
                runs.append(MergeRun(seg.base_offset, tuple(run)))
            run = []
    return runs


def merge_run(log_path: str, partition: int, run: MergeRun, storage: Storage,
              batches: Callable[[DataFile], Iterator[pa.RecordBatch]]) -> WrittenFile | None:
    """Write ``run`` as one file of its segment (``batches`` reads a file in offset order)."""
    builder = DataFileBuilder(
        log_path, f"partition={partition}/segment={run.segment}", "log",
        {"partition": str(partition), "segment": str(run.segment)}, storage=storage,
    )
    try:
        for f in run.files:
            for batch in batches(f):
                builder.write(batch)
        added = builder.close()
    except BaseException:
        builder.abort()
        raise
    written = [f.modified_ms for f in run.files if f.modified_ms is not None]
    if added is not None and written:  # the write time of the newest, as cleaning keeps it
        added = dataclasses.replace(added, modified_ms=max(written))
    return added
