"""The latest-value table ``L/T/table``: one row per live key, kept by MERGE from the log.

Commit protocol of a catch-up, per topic:

1. Read one snapshot of ``L/T/log`` (per partition the offset ingest committed, L) and the
   table's app transactions ``compactor-table-<partition>`` (the last log offset merged, M).
2. Read from the log the records with M < offset <= L of every partition that lags.
3. Reduce them to one record per key: within a partition the highest offset wins (Kafka's
   order); across partitions (a key moved when partitions were added) the latest timestamp
   wins, then the higher partition.
4. MERGE them into the table on ``t.key = s.key`` in one Delta commit that moves every
   merged partition's app transaction to L: a newer value updates or inserts, a newer
   tombstone deletes. When the table holds none of their keys, the same change is an append
   of their values in one commit with the same app transactions
   (:mod:`compactor.lake.new_keys`). A crash before the commit changes nothing; the next
   catch-up redoes it.
5. Once the table holds ``COMPACT_AT_FILES`` small files (a MERGE that only inserts adds one),
   rewrite them as few in an OPTIMIZE commit (:mod:`compactor.lake.small_files`); the files it
   replaced still hold values, so the caller wakes the vacuum as for a MERGE's removals. A
   failure is logged and tried again after the next MERGE.

A topic with typed formats (``key.format`` / ``value.format``) decodes the range's records
between steps 2 and 3 (:mod:`compactor.formats`): records that do not decode are left out
(ingest already reported them to ``L/T/rejected``), so a key keeps its last value that did;
records of a schema that would change a column's type are left out and reported to
``L/T/rejected`` (:func:`~compactor.lake.rejected.report_type_changes`, exactly once); the
decoded fields become typed columns, and a schema with new fields adds columns to the table
in the MERGE's own commit. Before step 4, each key's newest record of the range (a value or
a tombstone, decodable or not) deletes that key's older rows from ``L/T/rejected``
(:func:`~compactor.lake.rejected.drop_superseded`), and the older values of keys whose newest
record is now in another partition go from the log (:mod:`compactor.lake.moved_keys`).

Before step 2, rows whose record retention removed from the log go, the dead letters' first
and then the table's (:mod:`compactor.lake.retained_rows`): a row of partition P with an
offset below P's log start offset (the first segment's base) is a value a consumer of the log
would no longer see. Each delete commit moves its table's ``compactor-retained-<partition>``
to that log start, so it runs once per move.

The catch-up is driven by the versions alone, so it also repairs a table that lags after a
crash between a log commit and its MERGE. The table lags by design (``table.merge.interval.ms``),
so the cleaner keeps every tombstone past the table's ``compactor-table-<partition>`` whatever its
``delete.retention.ms`` horizon: a tombstone dropped unread would leave the erased value here.
The MERGE predicate names columns only; no key bytes ever reach the Delta log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.schema import Field as DeltaField
from deltalake.transaction import CommitProperties

from compactor.exceptions import LakeError
from compactor.formats import TopicFormat
from compactor.formats.columns import typed_columns
from compactor.formats.records import decode_records, decoders_for
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake import operations
from compactor.lake.app_transactions import position_lookup
from compactor.lake.layout import (
    CHANGE_FEED,
    TABLE_PROPERTIES_LATEST,
    ensure_table,
    open_table,
    topic_paths,
    update_properties,
)
from compactor.lake.log_follower import log_view
from compactor.lake.moved_keys import drop_moved, moved_records, table_rows
from compactor.lake.new_keys import append_new, appendable
from compactor.lake.range_reader import read_offsets
from compactor.lake.rejected import drop_superseded, rejected_rows, report_type_changes
from compactor.lake.retained_rows import delete_below, log_start, moved_starts
from compactor.lake.segments import PartitionLog
from compactor.lake.small_files import compact_small_files
from compactor.lake.storage import Storage, failure
from compactor.lake.written_records import WrittenLog
from compactor.positions import TABLE

log = logging.getLogger(__name__)

# Step 5: past this many files under half the target, the table's small files are rewritten
# as files of up to the target. A MERGE opens every file of the table, so without it a topic
# of mostly new keys made each MERGE slower than the last (bench/README.md).
COMPACT_AT_FILES = 16
COMPACT_TARGET_BYTES = 32 * 1024 * 1024

_NEWER = ("((s.partition = t.partition AND s.offset > t.offset) OR "
          "(s.partition <> t.partition AND (s.timestamp > t.timestamp OR "
          "(s.timestamp = t.timestamp AND s.partition > t.partition))))")


@dataclass(frozen=True)
class LatestStats:
    records: int = 0  # log records read
    keys: int = 0  # distinct keys merged
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    tombstones: int = 0
    merged_upto: dict[int, int] = field(default_factory=dict)  # partition -> last offset
    left_out: int = 0  # typed topics: records that did not decode (reported at ingest)
    type_changes: int = 0  # records of a schema the table cannot merge (reported now)
    columns_added: tuple[str, ...] = ()
    rejected_erased: int = 0  # rows of L/T/rejected a newer record superseded
    moved_values: int = 0  # log values whose key's tombstone is in another partition
    compacted: int = 0  # table files step 5 replaced (they wait for vacuum)


def latest_per_key(records: pa.Table) -> pa.Table:
    """One record per key (step 3); null keys are not keys and are left out.

    A hash aggregation over the narrow columns, not a sort of the whole table by key:
    positions in (partition, offset) order make the last position of each (key, partition)
    group its highest offset, and only the winning rows are taken from the wide table. Only
    when a key appears in several partitions is that (small) result sorted by key.
    """
    if records.num_rows == 0:
        return records.filter(pc.is_valid(records.column("key")))
    order = pc.sort_indices(records.select(["partition", "offset"]),
                            [("partition", "ascending"), ("offset", "ascending")])
    narrow = pa.table({"key": pc.take(records.column("key"), order),
                       "partition": pc.take(records.column("partition"), order),
                       "pos": pa.array(np.arange(records.num_rows, dtype=np.int64))})
    groups = narrow.group_by(["key", "partition"], use_threads=False).aggregate([("pos", "max")])
    groups = groups.filter(pc.is_valid(groups.column("key")))
    winners = order.to_numpy()[groups.column("pos_max").to_numpy()]
    records = records.take(pa.array(np.sort(winners)))
    if pc.count_distinct(records.column("key")).as_py() == records.num_rows:
        return records
    records = records.take(pc.sort_indices(records, [("key", "ascending"),
                                                     ("timestamp", "ascending"),
                                                     ("partition", "ascending")]))
    keys, n = records.column("key"), records.num_rows
    last_of_key = pc.not_equal(keys.slice(0, n - 1), keys.slice(1)).combine_chunks()
    return records.filter(pa.concat_arrays([last_of_key, pa.array([True])]))


@dataclass
class _Typed:
    records: pa.Table  # the records that go on to the MERGE, with typed columns
    left_out: int
    changes: pa.Table | None  # rows for L/T/rejected
    added: list[str]


def _decode(records: pa.Table, topic: str, formats: TopicFormat, table_schema: pa.Schema,
            now_ms: int) -> _Typed:
    """Typed columns for ``records``; records that do not decode or merge are left out."""
    existing = pa.schema([f for f in table_schema if f.name not in KAFKA_SCHEMA.names])
    live = pc.is_valid(records.column("value"))
    decoded = decode_records(records, decoders_for(topic, formats))
    typed = typed_columns(records.num_rows, decoded, existing)
    keep = [not (lv and (f is not None or c is not None)) for lv, f, c
            in zip(live.to_pylist(), typed.failed, typed.type_changes, strict=True)]
    changed = [i for i, c in enumerate(typed.type_changes) if c is not None]
    changes = None
    if changed:
        picked = pa.array(changed, pa.int64())
        changes = rejected_rows(records.take(picked), [typed.type_changes[i] for i in changed],
                                [typed.schema_ids[i] for i in changed], now_ms)
    for name in typed.table.column_names:
        records = records.append_column(name, typed.table.column(name))
    mask = pa.array(keep)
    return _Typed(records.filter(mask), keep.count(False) - len(changed), changes,
                  typed.added)


def _add_columns(table: DeltaTable, fields: list[pa.Field], path: str, topic: str) -> None:
    """Add a schema's new columns in its own order (a MERGE's schema evolution orders them
    as it likes); a crash before the MERGE leaves them empty, and the MERGE fills them."""
    names = ", ".join(f.name for f in fields)
    try:
        table.alter.add_columns([DeltaField.from_arrow(f) for f in fields],
                                commit_properties=operations.properties(
                                    operations.MERGE_LATEST, f"new columns of {topic}: {names}"))
    except Exception as exc:
        raise LakeError(f"cannot add columns to {path}: {failure(path, exc)}") from exc


def _kept(written: WrittenLog | None, topic: str, plog: PartitionLog, lo: int,
          hi: int) -> pa.Table | None:
    """Step 2 from the records kept in the driver (:mod:`compactor.lake.written_records`),
    without those retention has removed since; None when they do not cover the range."""
    rows = None if written is None else written.records(topic, plog.partition, lo, hi)
    start = log_start(plog)
    if rows is not None and start is not None and start > lo + 1:
        rows = rows.filter(pc.greater_equal(rows.column("offset"), start))
    return rows


def _drop_retained_rejected(path: str, partitions: Mapping[int, PartitionLog],
                            storage: Storage) -> None:
    """Delete the dead letters below their partitions' log starts (when the table exists)."""
    rejected = open_table(path, storage)
    if rejected is not None:
        moved = moved_starts(partitions, position_lookup(rejected, path, storage))
        delete_below(rejected, moved, path, "dead letters")


def _ensure_latest(path: str, storage: Storage, change_feed: bool) -> DeltaTable:
    """``L/T/table``, created or switched to keep a change data feed as configured."""
    wanted = "true" if change_feed else "false"
    table = ensure_table(path, KAFKA_SCHEMA, None, {
        **TABLE_PROPERTIES_LATEST, CHANGE_FEED: wanted}, storage=storage)
    try:
        changed = update_properties(table, {CHANGE_FEED: wanted}, "table.change.data.feed")
    except Exception as exc:
        raise LakeError(f"cannot set {CHANGE_FEED}={wanted} on {path}: "
                        f"{failure(path, exc)}") from exc
    return storage.table(path) if changed else table


def catch_up(lake_path: str, topic: str, storage: Storage,
             formats: TopicFormat | None = None, now_ms: int = 0,
             generation: int | None = None, partitions: Collection[int] | None = None,
             max_records: int = 0, erase_moved: bool = False,
             change_feed: bool = False, written: WrittenLog | None = None) -> LatestStats:
    """Bring ``L/T/table`` up to what ``L/T/log`` holds (steps 1-4), under the caller's
    commit lock; ``generation`` is the run's writer generation of the log (fencing).
    ``partitions`` and ``max_records`` (offsets per partition, 0: all) bound one call's
    work: a rebuild catches up in steps of bounded memory. ``erase_moved``: drop from the log
    the values of keys whose tombstone is in another partition (a compacted topic whose
    cleaner runs; :mod:`compactor.lake.moved_keys`). ``change_feed``: the table keeps a Delta
    change data feed (``table.change.data.feed``). ``written``: the records this process's
    micro-batches committed, read from there instead of the files where they cover a
    partition's range."""
    paths = topic_paths(lake_path, topic)
    view = log_view(paths.log, storage)
    if view is None:
        return LatestStats()
    table = _ensure_latest(paths.table, storage, change_feed)
    # Two positions per partition: read at once (only RETAINED ones move before they are read).
    position = position_lookup(table, paths.table, storage)
    starts = moved_starts(view.partitions, position)
    if starts:  # the dead letters first: a crash between the two leaves the table's to redo
        _drop_retained_rejected(paths.rejected, view.partitions, storage)
    retained = delete_below(table, starts, paths.table, "rows")
    ranges: dict[int, tuple[int, int]] = {}
    parts: list[pa.Table] = []
    columns = [f.name for f in KAFKA_SCHEMA if f.name != "partition"]
    for partition, plog in view.partitions.items():
        if partitions is not None and partition not in partitions:
            continue
        merged = position(TABLE.id(partition))
        lo = merged if merged is not None else -1
        if plog.committed_offset is None or plog.committed_offset <= lo:
            continue
        hi = plog.committed_offset if max_records <= 0 else min(plog.committed_offset,
                                                               lo + max_records)
        ranges[partition] = (lo, hi)
        rows = _kept(written, topic, plog, lo, hi)
        if rows is None:
            rows = read_offsets(view.uri, plog, lo, hi, columns, storage)
        if rows.num_rows:
            rows = rows.select(KAFKA_SCHEMA.names)
            parts.append(rows if rows.schema.equals(KAFKA_SCHEMA) else rows.cast(KAFKA_SCHEMA))
    if not ranges:
        return LatestStats(deleted=retained)
    records = pa.concat_tables(parts) if parts else KAFKA_SCHEMA.empty_table()
    read = records.num_rows
    every = records
    newest = latest_per_key(records)  # every record supersedes, decodable or not
    typed = None
    if formats is not None and formats.typed and records.num_rows:
        typed = _decode(records, topic, formats, pa.schema(table.schema().to_arrow()),
                        now_ms or int(time.time() * 1000))
        records = typed.records
        if typed.changes is not None:
            report_type_changes(paths.rejected, typed.changes,
                                {p: hi for p, (_, hi) in ranges.items()}, storage)
        if typed.added:
            _add_columns(table, [records.schema.field(n) for n in typed.added], paths.table,
                         topic)
            log.info("table %s: new columns from a new schema: %s", topic,
                     ", ".join(typed.added))
    erased = drop_superseded(paths.rejected, newest, storage)
    moved = 0
    # Only a key whose newest record of the range is a tombstone can be erased elsewhere (the
    # table holds values): the table is read only for those, and only when there are any.
    erased_keys = newest.filter(pc.is_null(newest.column("value"))).column("key")
    if erase_moved and len(view.partitions) > 1 and len(erased_keys):
        rows = table_rows(table, erased_keys.combine_chunks(), paths.table)
        moved = drop_moved(view, moved_records(every, rows), storage, generation)
    # Decoding leaves records out, so a typed topic's MERGE source is its own reduction.
    source = newest if typed is None else latest_per_key(records)
    txns = [TABLE.moved_to(hi, p) for p, (_, hi) in ranges.items()]
    props = operations.properties(operations.MERGE_LATEST,
                                  f"latest values of {topic} up to the log", txns)
    try:
        table.update_incremental()  # the commits since it was opened, not a reopen
        before = table.version()
        if _plain(table, typed) and appendable(table, source.column("key"), paths.table,
                                               storage):
            metrics = append_new(table, source, props)
        else:
            metrics = _merge(table, source, bool(typed and typed.added), props)
        if table.version() == before:  # a MERGE that changed no row commits nothing
            table.create_write_transaction([], "append", table.schema(),
                                           commit_properties=props)
    except Exception as exc:
        raise LakeError(f"cannot bring {paths.table} up to its log: "
                        f"{failure(paths.table, exc)}") from exc
    compacted = _compact(table, paths.table, topic)
    stats = LatestStats(
        records=read, keys=source.num_rows,
        inserted=int(metrics.get("num_target_rows_inserted", 0)),
        updated=int(metrics.get("num_target_rows_updated", 0)),
        deleted=int(metrics.get("num_target_rows_deleted", 0)) + retained,
        tombstones=records.column("value").null_count,
        merged_upto={p: hi for p, (_, hi) in ranges.items()},
        left_out=typed.left_out if typed else 0,
        type_changes=typed.changes.num_rows if typed and typed.changes is not None else 0,
        columns_added=tuple(typed.added) if typed else (),
        rejected_erased=erased,
        moved_values=moved,
        compacted=compacted,
    )
    log.info("table %s: merged %d keys (%d inserted, %d updated, %d deleted)", topic,
             stats.keys, stats.inserted, stats.updated, stats.deleted)
    return stats


def _merge(table: DeltaTable, source: pa.Table, merge_schema: bool,
           props: CommitProperties) -> dict[str, Any]:
    """Step 4 by delta-rs's MERGE; its metrics. Raises delta-rs's errors."""
    return dict(table.merge(source, predicate="t.key = s.key", source_alias="s",
                            target_alias="t", merge_schema=merge_schema,
                            commit_properties=props)
                .when_matched_delete(predicate=f"s.value IS NULL AND {_NEWER}")
                .when_matched_update_all(predicate=f"s.value IS NOT NULL AND {_NEWER}")
                .when_not_matched_insert_all(predicate="s.value IS NOT NULL")
                .execute())


def _plain(table: DeltaTable, typed: _Typed | None) -> bool:
    """Whether a catch-up may append (:mod:`compactor.lake.new_keys`): a table of Kafka's
    columns only, merged from undecoded records."""
    return typed is None and table.schema().to_arrow().names == KAFKA_SCHEMA.names


def _compact(table: DeltaTable, path: str, topic: str) -> int:
    """Step 5: the table's small files rewritten as few, once due; how many it replaced."""
    try:
        return compact_small_files(table, COMPACT_TARGET_BYTES, COMPACT_AT_FILES,
                                   operations.COMPACT_TABLE,
                                   f"latest values of {topic}: small files rewritten as few")
    except Exception as exc:  # the MERGE committed; the table only reads slower meanwhile
        log.warning("%s: cannot compact the latest-value table: %s", path,
                    failure(path, exc))
        return 0
