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
   tombstone deletes. A crash before the commit changes nothing; the next catch-up redoes it.

The catch-up is driven by the versions alone, so it also repairs a table that lags after a
crash between a log commit and its MERGE. The table lags by design (``table.merge.interval.ms``),
so the cleaner keeps every tombstone past the table's ``compactor-table-<partition>`` whatever its
``delete.retention.ms`` horizon: a tombstone dropped unread would leave the erased value here.
The MERGE predicate names columns only; no key bytes ever reach the Delta log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checkpoints import TABLE
from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.layout import (
    KAFKA_SCHEMA,
    TABLE_PROPERTIES_LATEST,
    ensure_table,
    topic_paths,
)
from compactor.lake.log_state import log_view
from compactor.lake.offset_ranges import read_offsets
from compactor.lake.storage import Storage

log = logging.getLogger(__name__)

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


def latest_per_key(records: pa.Table) -> pa.Table:
    """Step 3: one record per key; null keys are not keys and are left out.

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


def catch_up(lake_path: str, topic: str, storage: Storage) -> LatestStats:
    """Bring ``L/T/table`` up to what ``L/T/log`` holds (steps 1-4)."""
    paths = topic_paths(lake_path, topic)
    view = log_view(paths.log, storage)
    if view is None:
        return LatestStats()
    table = ensure_table(paths.table, KAFKA_SCHEMA, None, TABLE_PROPERTIES_LATEST,
                         storage=storage)
    ranges: dict[int, tuple[int, int]] = {}
    parts: list[pa.Table] = []
    columns = [f.name for f in KAFKA_SCHEMA if f.name != "partition"]
    for partition, plog in view.partitions.items():
        merged = TABLE.read(table, partition)
        lo = merged if merged is not None else -1
        if plog.committed_offset is None or plog.committed_offset <= lo:
            continue
        ranges[partition] = (lo, plog.committed_offset)
        rows = read_offsets(view.uri, plog, lo, plog.committed_offset, columns,
                            storage)
        if rows.num_rows:
            parts.append(rows.select(KAFKA_SCHEMA.names).cast(KAFKA_SCHEMA))
    if not ranges:
        return LatestStats()
    records = pa.concat_tables(parts) if parts else KAFKA_SCHEMA.empty_table()
    source = latest_per_key(records)
    txns = [TABLE.moved_to(hi, p) for p, (_, hi) in ranges.items()]
    try:
        metrics = (
            storage.table(paths.table).merge(
                source, predicate="t.key = s.key", source_alias="s", target_alias="t",
                commit_properties=operations.properties(
                    operations.MERGE_LATEST, f"latest values of {topic} up to the log", txns),
            )
            .when_matched_delete(predicate=f"s.value IS NULL AND {_NEWER}")
            .when_matched_update_all(predicate=f"s.value IS NOT NULL AND {_NEWER}")
            .when_not_matched_insert_all(predicate="s.value IS NOT NULL")
            .execute()
        )
    except Exception as exc:
        raise LakeError(f"MERGE into {paths.table} failed: {exc}") from exc
    stats = LatestStats(
        records=records.num_rows, keys=source.num_rows,
        inserted=int(metrics.get("num_target_rows_inserted", 0)),
        updated=int(metrics.get("num_target_rows_updated", 0)),
        deleted=int(metrics.get("num_target_rows_deleted", 0)),
        tombstones=records.column("value").null_count,
        merged_upto={p: hi for p, (_, hi) in ranges.items()},
    )
    log.info("table %s: merged %d keys (%d inserted, %d updated, %d deleted)", topic,
             stats.keys, stats.inserted, stats.updated, stats.deleted)
    return stats
