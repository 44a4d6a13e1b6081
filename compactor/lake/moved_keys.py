"""Values of keys that moved partition: found by the latest-value table's catch-up, dropped
from the log when the key's newest record is a tombstone.

Kafka compacts each partition on its own, so a key whose producer now sends it to another
partition (partitions were added, or a partitioner of the user's own) keeps its older values in
the old partition for as long as the topic lives, even after its tombstone in the new one. The
erasure promise here is per key: the latest-value table already decides each key's newest
record across partitions (the latest timestamp, then the higher partition), and when that
record is a tombstone, the key's values in every other partition are older than the erasure
and go from the log as the tombstone would make them go in its own partition. A newer *value*
in another partition erases nothing: Kafka keeps both, and so does the log.

The table's catch-up (:mod:`compactor.lake.latest_table`) finds these records before its MERGE,
from the records of the range it merges and the table's rows of the keys whose newest record in
the range is a tombstone (the key's newest record of every partition merged before). Per key
seen in more than one partition whose newest record is a tombstone, each other partition gives
(key, partition, offset): its highest offset of the key. :func:`drop_moved` drops every value
of the key at or below that offset from that partition (:mod:`compactor.lake.key_erasure`,
tombstones kept), before the MERGE commits: a crash in between leaves the table's rows and
positions as they were, so the next catch-up finds the same records (already gone) and merges.
"""

from __future__ import annotations

import contextlib
import logging

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.key_erasure import erase_keys
from compactor.lake.log_follower import LogView
from compactor.lake.storage import Storage, failure

log = logging.getLogger(__name__)

_NARROW = ["key", "partition", "offset", "timestamp", "tombstone"]
_MOVED = pa.schema([("key", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64())])


def _ms(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Epoch ms of a timestamp column, whatever unit the reader gave it."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        column = column.cast(pa.timestamp("ms", kind.tz))
    return column.cast(pa.int64())


def _narrow(table: pa.Table) -> pa.Table:
    """Key, partition, offset, timestamp (ms) and whether the record is a tombstone (the
    table holds values only)."""
    tombstone = (pc.is_null(table.column("value")) if "value" in table.column_names
                 else pa.array([False] * table.num_rows))
    return pa.table({"key": table.column("key").cast(pa.binary()),
                     "partition": table.column("partition").cast(pa.int32()),
                     "offset": table.column("offset").cast(pa.int64()),
                     "timestamp": _ms(table.column("timestamp")),
                     "tombstone": tombstone})


def table_rows(table: DeltaTable, keys: pa.Array, path: str) -> pa.Table:
    """The table's (key, partition, offset, timestamp) of ``keys``, read a batch at a time
    (the key filter is applied here: the table's file statistics cannot prune keys)."""
    if len(keys) == 0:
        return pa.table({c: pa.array([], t) for c, t in
                         zip(_NARROW, [pa.binary(), pa.int32(), pa.int64(), pa.int64(),
                                       pa.bool_()], strict=True)})
    try:
        wanted = keys.cast(pa.binary())
        found = [_narrow(pa.Table.from_batches([b])).filter(
                     pc.is_in(b.column("key").cast(pa.binary()), value_set=wanted))
                 for b in table.to_pyarrow_dataset().to_batches(columns=_NARROW[:4])]
    except Exception as exc:
        raise LakeError(f"cannot read the keys of {path}: {failure(path, exc)}") from exc
    return pa.concat_tables(found) if found else table_rows(table, keys[:0], path)


def moved_records(records: pa.Table, rows: pa.Table) -> pa.Table:
    """(key, partition, offset) per key and partition older than the key's newest record when
    that is a tombstone in another partition: ``records`` is the range being merged, ``rows``
    the table's rows of its keys; offset is the partition's highest offset of the key."""
    every = pa.concat_tables([_narrow(records.select(_NARROW[:4] + ["value"])), rows])
    every = every.filter(pc.is_valid(every.column("key")))
    spread = every.group_by("key").aggregate([("partition", "count_distinct")])
    keys = spread.filter(pc.greater(spread.column("partition_count_distinct"), 1)).column("key")
    if len(keys) == 0:
        return _MOVED.empty_table()
    every = every.filter(pc.is_in(every.column("key"), value_set=keys.combine_chunks()))
    # (key, partition) -> offset, time, tombstone of the key's newest record there
    newest: dict[tuple[bytes, int], tuple[int, int | None, bool]] = {}
    for k, p, o, t, dead in zip(*(every.column(c).to_pylist() for c in _NARROW), strict=True):
        if (k, p) not in newest or o > newest[(k, p)][0]:
            newest[(k, p)] = (o, t, dead)
    winner: dict[bytes, tuple[int, int, bool]] = {}  # key -> (time, partition, tombstone)
    undated: set[bytes] = set()  # a record without a time: which one is newer is not known
    for (k, p), (_, t, dead) in newest.items():
        if t is None:
            undated.add(k)
        else:
            winner[k] = max(winner.get(k, (t, p, dead)), (t, p, dead))
    lost = [(k, p, o) for (k, p), (o, _, _) in newest.items()
            if k not in undated and winner[k][2] and winner[k][1] != p]
    return pa.table([pa.array([x[i] for x in lost], f.type) for i, f in enumerate(_MOVED)],
                    schema=_MOVED)


def drop_moved(view: LogView, moved: pa.Table, storage: Storage,
               generation: int | None) -> int:
    """Drop from each partition of the log the values of ``moved`` at or below their offsets;
    how many went. The caller holds the commit lock."""
    values = 0
    for partition in sorted(set(moved.column("partition").to_pylist())):
        mine = moved.filter(pc.equal(moved.column("partition"), partition))
        erased = erase_keys(view, partition, mine.column("key").combine_chunks(),
                            pc.add(mine.column("offset"), 1).combine_chunks(), storage,
                            contextlib.nullcontext(), generation,
                            "keys whose tombstone is in another partition",
                            operation=operations.MOVED_KEYS)
        values += erased.values
    if values:
        log.info("log %s: dropped %d older values of keys whose tombstone is in another "
                 "partition", view.uri, values)
    return values
