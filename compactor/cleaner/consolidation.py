"""Segment consolidation: a segment's many micro-batch files become one, no record changed.

Kafka keeps one file per segment; a mirror appends one file per partition per micro-batch
(86,400 a day at a 1 s trigger). So once a segment rolls, the cleaner's partition task rewrites
its files as one file, in offset order, every record, offset, timestamp, header and tombstone
horizon as it was, for every cleanup policy; and as the active segment collects small files,
its newest ones become one now and then (see :func:`merge_runs`). The rewrite rides in the
partition's cleaning commit (see :mod:`compactor.cleaner.maintenance`), its remove and
add actions marked ``dataChange=false`` so that Delta readers know no data changed.

A segment the same pass compacts or expires is not merged: its rewrite already makes it one
file, or it goes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from compactor.lake.datafiles import DataFileBuilder, WrittenFile
from compactor.lake.segments import DataFile, Segment
from compactor.lake.storage import Storage

# The newest small files of the active segment are merged once there are this many of them;
# files of ACTIVE_SMALL_BYTES or more stay as they are, so a segment near segment.bytes is
# not rewritten again and again for a few new files.
ACTIVE_MERGE_FILES = 16
ACTIVE_SMALL_BYTES = 8 * 1024 * 1024
# An older file joins the newer ones' merge while it holds at most this many times their
# record bytes.
JOIN_RATIO = 2


@dataclass(frozen=True)
class MergeRun:
    """Files of one segment, consecutive in offset order, to be rewritten as one."""

    segment: int
    files: tuple[DataFile, ...]


def merge_runs(segments: Iterable[Segment], active: Segment | None) -> list[MergeRun]:
    """What a pass merges: every closed segment of several files whole; in the active one,
    each run of small files that a large file closed whole, and the open run's newest files
    by :func:`_newest_run`."""
    runs: list[MergeRun] = []
    for seg in segments:
        files = sorted(seg.files, key=lambda f: f.first_offset)
        if seg is not active:
            if len(files) > 1:
                runs.append(MergeRun(seg.base_offset, tuple(files)))
            continue
        run: list[DataFile] = []
        for f in files:
            if f.size_bytes < ACTIVE_SMALL_BYTES:
                run.append(f)
                continue
            if len(run) > 1:  # closed by a large file: it grows no more
                runs.append(MergeRun(seg.base_offset, tuple(run)))
            run = []
        newest = _newest_run(run)
        if newest:
            runs.append(MergeRun(seg.base_offset, newest))
    return runs


def _newest_run(run: Sequence[DataFile]) -> tuple[DataFile, ...]:
    """The files of the active segment's open run (small files, offset order) to merge now.

    From the newest file back, an older file joins while it holds at most JOIN_RATIO times
    the record bytes of the files after it (a small file's size is mostly Parquet's own);
    the merge happens once ACTIVE_MERGE_FILES have joined. Merging the whole run instead
    would rewrite its first, ever larger file for every ACTIVE_MERGE_FILES new ones: the
    bytes written would grow with the segment's history. This way a file joins a merge only
    when its bytes grow by half, so a record is rewritten a logarithmic number of times; and
    each file that stops a merge holds more than JOIN_RATIO times the bytes of all newer
    ones, which bounds the run's length.
    """
    taken = 0
    joined = 0
    for f in reversed(run):
        if joined and f.record_bytes > JOIN_RATIO * taken:
            break
        taken += f.record_bytes
        joined += 1
    if joined < ACTIVE_MERGE_FILES:
        return ()
    return tuple(run[len(run) - joined:])


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
