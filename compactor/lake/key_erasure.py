"""Erase named keys' values from one partition of ``L/T/log``, active segment included.

The cleaner erases a key's older values because a newer record of the key (its tombstone)
is in the same partition. Two erasures have no such record there, so they drop values here by
name: every value of a key of the set with an offset below a bound (one for all keys, or one
per key). The topic erased a key the mirror never saw a tombstone for (Kafka's cleaner removed
it while the mirror was away, :mod:`compactor.erasure.reconcile`); or the key's newer record
is in another partition (:mod:`compactor.lake.moved_keys`). Tombstones stay: the tombstone
readers may not have read them yet, and the cleaner drops them by its own rules.

Commit protocol, per partition:

1. From one view of the log, read the keys and offsets of every file holding offsets below the
   bound, and note the partition's rewrite fence F (``compactor-rewrite-<partition>``).
2. Rewrite each file that holds such a value: the other records are copied unchanged into a new
   file of the same segment, which keeps the replaced file's write time.
3. Under the commit lock, commit the removes and adds with the fence moved to F + 1, written only
   if the fence is still F, the writer generation is this run's and every removed file is still
   live (:mod:`compactor.lake.log_commit`): a cleaner that rewrote the same files first wins and
   this erasure is redone from a new view.

Nothing is visible before step 3; a crash leaves unreferenced files, which vacuum removes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compactor.lake import fencing, log_commit, operations
from compactor.lake.commit_files import Conflict
from compactor.lake.datafiles import DataFileBuilder, WrittenFile
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA
from compactor.lake.log_follower import LogView, follow
from compactor.lake.range_reader import file_batches
from compactor.lake.segments import DataFile
from compactor.lake.storage import Storage
from compactor.positions import REWRITE, WRITER


@dataclass(frozen=True)
class KeysErased:
    """What one erasure dropped from a partition."""

    partition: int
    values: int  # records dropped
    keys: pa.Array  # the distinct keys whose values went
    files: int  # files rewritten


def _plain(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], pa.binary())
    return keys.cast(pa.binary())


def lake_keys(view: LogView, partition: int, below: int, storage: Storage,
              ) -> tuple[pa.Array, pa.Array]:
    """(keys with a record below ``below``, keys with a record at or past it) of a partition,
    each distinct: what step 1 reads."""
    plog = view.partitions.get(partition)
    early: list[pa.Array] = []
    late: list[pa.Array] = []
    for seg in plog.segments if plog is not None else ():
        for f in seg.files:
            for batch in file_batches(view.uri, f, ["key", "offset"], storage,
                                      f"{view.uri}-{partition}"):
                keys = _plain(batch.column("key"))
                before = pc.less(batch.column("offset"), below)
                early.append(pc.unique(keys.filter(before)))
                late.append(pc.unique(keys.filter(pc.invert(before))))
    empty = pa.array([], pa.binary())
    return (pc.unique(pa.concat_arrays(early)) if early else empty,
            pc.unique(pa.concat_arrays(late)) if late else empty)


# One offset for every key, or one per key (aligned with the keys).
Bound: TypeAlias = "int | pa.Array"


def _doomed(batch: pa.RecordBatch, keys: pa.Array, below: Bound) -> np.ndarray:
    """Which records of a batch are values of ``keys`` below ``below``."""
    batch_keys = _plain(batch.column("key"))
    if isinstance(below, int):
        hit = pc.and_(pc.is_in(batch_keys, value_set=keys),
                      pc.less(batch.column("offset"), below))
    else:  # null where the record's key is not one of the keys
        hit = pc.less(batch.column("offset"),
                      pc.take(below, pc.index_in(batch_keys, value_set=keys)))
    if "value" in batch.schema.names:
        hit = pc.and_(hit, pc.is_valid(batch.column("value")))
    doomed: np.ndarray = hit.fill_null(False).to_numpy(zero_copy_only=False)
    return doomed


def _rewrite(view: LogView, partition: int, f: DataFile, keys: pa.Array, below: Bound,
             storage: Storage) -> tuple[WrittenFile | None, int, pa.Array]:
    """Step 2 for one file: (its replacement, None if no record is left; records dropped;
    their keys)."""
    builder = DataFileBuilder(view.uri, f"partition={partition}/segment={f.segment}", "log",
                              {"partition": str(partition), "segment": str(f.segment)},
                              storage=storage)
    dropped = 0
    gone: list[pa.Array] = []
    try:
        for batch in file_batches(view.uri, f, None, storage, f"{view.uri}-{partition}"):
            doomed = _doomed(batch, keys, below)
            dropped += int(doomed.sum())
            gone.append(_plain(batch.column("key")).filter(pa.array(doomed)))
            kept = batch.filter(pa.array(~doomed))
            if kept.num_rows:
                builder.write(kept)
        if dropped == 0:  # only tombstones of the keys: the file stays as it is
            builder.abort()
            return None, 0, pa.array([], pa.binary())
        added = builder.close()
    except BaseException:
        builder.abort()
        raise
    if added is not None and f.modified_ms is not None:
        added = dataclasses.replace(added, modified_ms=f.modified_ms)
    return added, dropped, pa.concat_arrays(gone) if gone else pa.array([], pa.binary())


def erase_keys(view: LogView, partition: int, keys: pa.Array, below: Bound, storage: Storage,
               lock: AbstractContextManager[Any], generation: int | None, why: str,
               on_rewritten: Callable[[pa.Array], None] | None = None,
               operation: str = operations.RECONCILE) -> KeysErased:
    """Drop every value of ``keys`` (distinct) with an offset below ``below`` (one bound, or
    one per key) from the partition (steps 1-3); raises
    :class:`~compactor.lake.commit_files.Conflict` when another writer moved the partition
    first. ``on_rewritten`` gets the keys whose values go, after the files are written and
    before the commit (the erasure ledger records them there). ``lock`` is the commit lock, or
    a null context for a caller that holds it."""
    plog = view.partitions.get(partition)
    if plog is None or len(keys) == 0:
        return KeysErased(partition, 0, pa.array([], pa.binary()), 0)
    fence = view.rewrites.get(partition, 0)
    limit = below if isinstance(below, int) else int(pc.max(below).as_py())
    removed: list[DataFile] = []
    added: list[WrittenFile] = []
    values = 0
    gone: list[pa.Array] = []
    for seg in plog.segments:
        for f in seg.files:
            if f.first_offset >= limit:
                continue
            probe = file_batches(view.uri, f, ["key", "offset"], storage,
                                 f"{view.uri}-{partition}")
            if not any(_doomed(b, keys, below).any() for b in probe):
                continue  # no record of the keys (tombstones are decided in the rewrite)
            new, dropped, dropped_keys = _rewrite(view, partition, f, keys, below, storage)
            if dropped == 0:
                continue
            values += dropped
            gone.append(dropped_keys)
            removed.append(f)
            if new is not None:
                added.append(new)
    erased = pc.unique(pa.concat_arrays(gone)) if gone else pa.array([], pa.binary())
    if not removed:
        return KeysErased(partition, 0, erased, 0)
    if on_rewritten is not None:
        on_rewritten(erased)
    # Files of a refused commit are never referenced; vacuum removes them as orphans.
    bound = f"offset {below}" if isinstance(below, int) else "their newer records"
    _commit(view, partition, fence, removed, added, generation, lock, storage, operation,
            f"{why}: {values} values of {len(erased)} keys dropped from partition "
            f"{partition} below {bound}")
    return KeysErased(partition, values, erased, len(removed))


def _commit(view: LogView, partition: int, fence: int, removed: list[DataFile],
            added: list[WrittenFile], generation: int | None,
            lock: AbstractContextManager[Any], storage: Storage, operation: str,
            summary: str) -> None:
    """Step 3."""
    now_ms = int(time.time() * 1000)

    def check(position: Callable[[str], int | None]) -> None:
        fencing.check_generation(view.uri, generation, position(WRITER.id()))
        if (position(REWRITE.id(partition)) or 0) != fence:
            raise Conflict(f"{view.uri}: partition {partition} was rewritten meanwhile")

    with lock:
        log_commit.append(follow(view.uri, storage), added,
                          [REWRITE.moved_to(fence + 1, partition, now_ms=now_ms)],
                          operation, summary, check, LOG_SCHEMA,
                          LOG_PARTITION_COLUMNS, now_ms, removes=[(f, True) for f in removed])
