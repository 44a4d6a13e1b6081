"""Records of one partition between two offsets, read from its files in bounded batches
(and one file's batches, which the cleaner reads too).

The cleaner's tombstone readers (the erasure ledger, downstream deletes) scan every offset the
log committed since they last read it: on a first catch-up that is the whole partition. They
keep only tombstones, so they read batch by batch (a Parquet row group at most) and hold what
they keep, never a partition's values: their memory is a batch plus the tombstones found.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compactor.exceptions import LakeError
from compactor.lake.layout import LOG_SCHEMA, join
from compactor.lake.segments import DataFile, PartitionLog
from compactor.lake.storage import Storage

BATCH_ROWS = 64 * 1024
RELEASE_BYTES = 8 * 1024 * 1024  # iter_offsets gives freed pages back after this many read
# The columns a write task keeps of the tombstones it writes (WrittenTombstones.rows).
TOMBSTONE_COLUMNS = ["key", "offset", "timestamp"]


@dataclass(frozen=True)
class WrittenTombstones:
    """The tombstones one write task put in the log: every record with ``after < offset <=
    upto`` that the log holds came from that task (``after`` was the partition's last
    committed offset when it was planned), so a reader positioned at or past ``after`` finds
    its tombstones up to ``upto`` here instead of decoding the files' values again."""

    after: int
    upto: int
    rows: pa.Table  # TOMBSTONE_COLUMNS, in offset order

    def covers(self, lo: int, hi: int) -> bool:
        return self.after <= lo and hi == self.upto

    def __reduce__(self) -> tuple[object, tuple[int, int, pa.Table | None]]:
        # Most ranges hold no tombstone; an empty table pickles at a table's cost.
        return _written, (self.after, self.upto, self.rows if self.rows.num_rows else None)


@functools.cache
def no_tombstones() -> pa.Table:
    """An empty :attr:`WrittenTombstones.rows` (one, shared: a table is immutable)."""
    return LOG_SCHEMA.empty_table().select(TOMBSTONE_COLUMNS)


def _written(after: int, upto: int, rows: pa.Table | None) -> WrittenTombstones:
    return WrittenTombstones(after, upto, no_tombstones() if rows is None else rows)


def file_batches(log_uri: str, f: DataFile, columns: list[str] | None, storage: Storage,
                 owner: str, use_threads: bool = True,
                 batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """One data file's records, a batch (at most a row group) at a time; a file that cannot be
    read raises LakeError naming it and ``owner`` (its topic-partition, for status)."""
    try:
        fs, path = storage.filesystem(join(log_uri, f.path))
        with fs.open_input_file(path) as source:
            yield from pq.ParquetFile(source).iter_batches(
                batch_size=batch_rows, columns=columns, use_threads=use_threads)
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot read data file {f.path} of {owner}: {exc}") from exc


def iter_offsets(log_uri: str, plog: PartitionLog, after: int, upto: int, columns: list[str],
                 storage: Storage) -> Iterator[pa.RecordBatch]:
    """The records with ``after < offset <= upto``, in offset order, a batch at a time.

    ``columns`` must include ``offset``. A file that cannot be read raises LakeError naming it.
    """
    unreleased = 0  # bytes of the files read since the allocator last gave pages back
    for seg in plog.segments:
        if seg.base_offset > upto or seg.last_offset <= after:
            continue  # files are in offset order: the whole segment is outside the range
        for f in seg.files:
            if f.last_offset <= after or f.first_offset > upto:
                continue
            # One thread, and the allocator's free pages handed back every RELEASE_BYTES read:
            # otherwise a first catch-up's resident memory grows with the log (bench/README.md);
            # after every file, a range of small files cost as much in releases as in reads.
            for batch in file_batches(log_uri, f, columns, storage,
                                      f"partition {plog.partition}", use_threads=False):
                if f.first_offset <= after or f.last_offset > upto:
                    offsets = batch.column("offset")
                    batch = batch.filter(pc.and_(pc.greater(offsets, after),
                                                 pc.less_equal(offsets, upto)))
                if batch.num_rows:
                    yield batch
            unreleased += f.size_bytes
            if unreleased >= RELEASE_BYTES:
                pa.default_memory_pool().release_unused()
                unreleased = 0
    if unreleased:
        pa.default_memory_pool().release_unused()


def read_offsets(log_uri: str, plog: PartitionLog, after: int, upto: int,
                 columns: list[str], storage: Storage) -> pa.Table:
    """The records with ``after < offset <= upto`` as one table, with a ``partition`` column
    (files do not hold it: it is a partition value). For ranges meant to be held whole."""
    batches = list(iter_offsets(log_uri, plog, after, upto, columns, storage))
    if not batches:
        return pa.schema([*(pa.field(c, pa.null()) for c in columns),
                          pa.field("partition", pa.int32())]).empty_table()
    table = pa.Table.from_batches(batches)
    return table.append_column("partition",
                               pa.array([plog.partition] * table.num_rows, pa.int32()))


def read_tombstones(log_uri: str, plog: PartitionLog, after: int, upto: int,
                    columns: list[str], storage: Storage,
                    written: WrittenTombstones | None = None) -> pa.Table:
    """The tombstones (null value, non-null key) with ``after < offset <= upto``: ``columns``
    of each (without ``value``), read batch by batch so that no value is held; taken from
    ``written`` instead when it covers the range (the micro-batch that just wrote it)."""
    read = list(dict.fromkeys([*columns, "key", "offset", "value"]))
    kept = [c for c in read if c != "value"]
    if written is not None and written.covers(after, upto) and set(kept) <= set(
            TOMBSTONE_COLUMNS):
        rows = written.rows.select(kept)
        if not rows.num_rows:  # the common case: the batch wrote no tombstone
            return rows
        return rows.filter(pc.greater(rows.column("offset"), after))
    parts = []
    for batch in iter_offsets(log_uri, plog, after, upto, read, storage):
        mask = pc.and_(pc.is_null(batch.column("value")), pc.is_valid(batch.column("key")))
        found = batch.select(kept).filter(mask)
        if found.num_rows:
            parts.append(found)
    if not parts:
        return pa.schema([pa.field(c, pa.null()) for c in kept]).empty_table()
    return pa.Table.from_batches(parts)
