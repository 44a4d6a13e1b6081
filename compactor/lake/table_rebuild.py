"""Rebuild a topic's latest-value table ``L/T/table`` from its log, with today's schema.

A schema fixed after records were rejected (a field declared with the wrong type) does not
bring those records back: the table merged past them, and their dead letters stay in
``L/T/rejected``. The log holds every record, so the table can be made again from it, and
the dead letters of records that decode now can go.

Protocol (``compactor rebuild-table``):

1. Claim the topic's log (:mod:`compactor.lake.fencing`): a ``compactor run`` still mirroring
   the topic stops at its next commit instead of merging beside the rebuild.
2. In one commit of ``L/T/table``, replace it with an empty table of Kafka's columns (typed
   columns come back from the schema the records are decoded with now) and set every
   partition's ``compactor-table-<partition>`` to -1.
3. In one commit of ``L/T/rejected``, delete the rows of records that decode now and the
   rows of type changes, and set every partition's ``compactor-typed-<partition>`` to -1, so
   that the catch-up reports type changes again against the new columns.
4. Catch the table up with its log partition by partition, at most ``batch`` offsets per
   MERGE (each commit moves its partition's position, as any catch-up does).

A crash after step 2 leaves an empty table whose positions say so: the next catch-up (a run,
or this command again) rebuilds it. The removed files are deleted by vacuum after the grace,
as any removed file is.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pyarrow as pa
from deltalake import write_deltalake

from compactor.exceptions import LakeError
from compactor.formats import TopicFormat
from compactor.formats.records import decode_records, decoders_for, first_failures
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake import fencing, operations
from compactor.lake.latest_table import catch_up
from compactor.lake.layout import open_table, read_table, topic_paths
from compactor.lake.log_follower import log_view
from compactor.lake.rejected import TYPE_CHANGE, UNDECODABLE, rejection_kind
from compactor.lake.storage import Storage, failure
from compactor.positions import TABLE, TYPED

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did."""

    topic: str
    records: int  # log records merged
    rows: int  # rows of the new table
    dead_letters_dropped: int  # rows of L/T/rejected that decode now, or were type changes
    seconds: float


def _empty_table(path: str, partitions: list[int], topic: str, storage: Storage) -> None:
    """Step 2."""
    try:
        write_deltalake(
            path, KAFKA_SCHEMA.empty_table(), mode="overwrite", schema_mode="overwrite",
            storage_options=storage.delta_options(path),
            commit_properties=operations.properties(
                operations.REBUILD_TABLE, f"latest values of {topic} cleared to be rebuilt "
                "from the log", [TABLE.moved_to(-1, p) for p in partitions]))
    except Exception as exc:
        raise LakeError(f"cannot clear {path} for the rebuild: {failure(path, exc)}") from exc


def _obsolete_dead_letters(path: str, formats: TopicFormat | None, topic: str,
                           storage: Storage) -> pa.Table | None:
    """(partition, offset) of the rows of ``L/T/rejected`` that step 3 deletes."""
    table = open_table(path, storage)
    if table is None:
        return None
    rows = read_table(table)
    if rows.num_rows == 0:
        return rows.select(["partition", "offset"])
    kinds = [rejection_kind(r) for r in rows.column("reason").to_pylist()]
    doomed = [k == TYPE_CHANGE for k in kinds]
    undecodable = [i for i, k in enumerate(kinds) if k == UNDECODABLE]
    if undecodable and formats is not None and formats.typed:
        again = rows.take(pa.array(undecodable, pa.int64())).select(KAFKA_SCHEMA.names)
        reasons, _ = first_failures(again.num_rows,
                                    decode_records(again, decoders_for(topic, formats)))
        for i, reason in zip(undecodable, reasons, strict=True):
            doomed[i] = reason is None
    return rows.filter(pa.array(doomed)).select(["partition", "offset"])


def _drop_dead_letters(path: str, doomed: pa.Table, partitions: list[int], topic: str,
                       storage: Storage) -> int:
    """Step 3."""
    table = open_table(path, storage)
    if table is None:
        return 0
    props = operations.properties(
        operations.REBUILD_TABLE, f"dead letters of {topic} that decode now or were type "
        "changes, dropped for a rebuild", [TYPED.moved_to(-1, p) for p in partitions])
    try:
        if doomed.num_rows == 0:
            table.create_write_transaction([], "append", table.schema(),
                                           commit_properties=props)
            return 0
        metrics = (table.merge(doomed, predicate="t.partition = s.partition AND "
                               "t.offset = s.offset", source_alias="s", target_alias="t",
                               commit_properties=props)
                   .when_matched_delete().execute())
    except Exception as exc:
        raise LakeError(f"cannot drop dead letters from {path}: {failure(path, exc)}") \
            from exc
    return int(metrics.get("num_target_rows_deleted", 0))


def rebuild_table(lake_path: str, topic: str, storage: Storage,
                  formats: TopicFormat | None, batch: int = 100_000,
                  change_feed: bool = False) -> Rebuilt:
    """Steps 1-4 for ``topic``; ``change_feed`` as ``table.change.data.feed``."""
    started = time.monotonic()
    paths = topic_paths(lake_path, topic)
    view = log_view(paths.log, storage)
    if view is None:
        raise LakeError(f"{paths.log}: no log to rebuild {topic}'s table from (has "
                        "'compactor run' mirrored the topic into this lake?)")
    partitions = sorted(view.partitions)
    generation = fencing.claim(paths.log, storage)
    _empty_table(paths.table, partitions, topic, storage)
    doomed = _obsolete_dead_letters(paths.rejected, formats, topic, storage)
    dropped = (_drop_dead_letters(paths.rejected, doomed, partitions, topic, storage)
               if doomed is not None else 0)
    records = 0
    for partition in partitions:
        while True:
            stats = catch_up(lake_path, topic, storage, formats, generation=generation,
                             partitions=[partition], max_records=batch,
                             change_feed=change_feed)
            records += stats.records
            if not stats.merged_upto:
                break
    table = open_table(paths.table, storage)
    rows = table.count() if table is not None else 0
    result = Rebuilt(topic, records, rows, dropped, time.monotonic() - started)
    log.info("%s: rebuilt %s from %d log records: %d rows; %d dead letters dropped", topic,
             paths.table, records, rows, dropped)
    return result
