"""Reconcile the lake with its topic: erase the keys the topic erased while the mirror was away.

Kafka's cleaner removes a tombstone ``delete.retention.ms`` after it first cleaned it, and the
values it superseded at that first cleaning. A mirror that reads the tombstone's offset later
than that (it was stopped, or lagged) never sees it, and the lake would keep the value for
ever. :mod:`compactor.erasure.source_gap` decides when that could have happened; this module
repairs it. A compacted topic holds the latest record of every key, so every key the lake holds
a value of that the topic no longer has live was erased there (or, on ``compact,delete``,
expired), and goes from the lake as its tombstone would have made it go.

Protocol, per topic (the caller passes the time A it started from, before step 1):

1. List every partition's log start and end E on the broker, as the mirror's isolation level
   sees them.
2. Per partition: read the topic's live keys up to E (:mod:`compactor.kafka.live_keys`) and the
   lake's keys from a newer view of the log: the candidates are keys with a record below E
   that the topic does not hold live and the lake has no record of at or past E (written
   again since).
3. Drop the candidates' values below E from the log (:mod:`compactor.lake.key_erasure`), after
   recording each key whose values go as a ``reconciled`` event in the erasure ledger.
4. Under the commit lock, delete the candidates' rows below E of the partition from the
   latest-value table and from ``L/T/rejected``, by MERGE (no key reaches a Delta log).
5. Delete from every downstream table the candidates the topic holds live in no partition.
6. The caller records A as the log's ``compactor-caught-up`` position.

A crash anywhere before step 6 leaves the position where it was, so the next run reconciles
again; the work is idempotent (a key erased before is no longer a candidate) and a ledger event
may repeat. Vacuum deletes the rewritten files within ``vacuum.grace.ms``, as for any cleaning.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from compactor.config import CompactorConfig
from compactor.erasure.downstream import DownstreamEraser
from compactor.erasure.ledger import ErasureLedger
from compactor.exceptions import LakeError
from compactor.kafka.broker_offsets import OffsetReader
from compactor.kafka.live_keys import live_keys
from compactor.lake import operations
from compactor.lake.key_erasure import erase_keys, lake_keys
from compactor.lake.layout import open_table, topic_paths
from compactor.lake.log_follower import log_view
from compactor.lake.storage import Storage, failure

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reconciled:
    """What one reconciliation of a topic did."""

    topic: str
    at_ms: int  # the time it started from: every erasure of the topic before it is applied
    partitions: int  # partitions read from the broker
    keys: int  # keys whose values left the log
    values: int  # records dropped from the log
    rows: int  # rows deleted from the latest-value table, rejected records and downstream


def _delete_rows(path: str, source: pa.Table, storage: Storage, summary: str) -> int:
    """Delete the rows of ``source``'s (key, partition) below its offset from a table with
    ``key``, ``partition`` and ``offset`` columns (step 4); how many went."""
    table = open_table(path, storage)
    if table is None or source.num_rows == 0:
        return 0
    try:
        metrics = (table.merge(source, predicate="t.key = s.key AND t.partition = s.partition",
                               source_alias="s", target_alias="t",
                               commit_properties=operations.properties(
                                   operations.RECONCILE, summary))
                   .when_matched_delete(predicate="t.offset < s.offset").execute())
    except Exception as exc:
        raise LakeError(f"cannot delete erased keys from {path}: {failure(path, exc)}") from exc
    return int(metrics.get("num_target_rows_deleted", 0))


def reconcile(config: CompactorConfig, topic: str, at_ms: int, lock: threading.Lock,
              ledger: ErasureLedger, eraser: DownstreamEraser,
              generation: int | None = None) -> Reconciled:
    """Steps 1-5 for ``topic``; raises on a broker or lake failure (nothing is then
    recorded as caught up, so the next attempt starts over)."""
    paths = topic_paths(config.lake_path, topic)
    client = config.kafka_client_config()
    reader = OffsetReader(client)
    tps = reader.partitions([topic], None)
    starts = reader.offsets(tps, "earliest")
    ends = reader.offsets(tps, "latest")
    live_anywhere: list[pa.Array] = []
    doomed: list[pa.Table] = []
    keys = values = 0
    for tp in tps:
        partition, end = tp[1], ends[tp]
        live = live_keys(client, topic, partition, starts[tp], end)
        live_anywhere.append(live)
        view = log_view(paths.log, config.storage, [partition])
        if view is None:
            continue
        early, late = lake_keys(view, partition, end, config.storage)
        gone = early.filter(pc.invert(pc.or_(pc.is_in(early, value_set=live),
                                            pc.is_in(early, value_set=late))))
        if len(gone) == 0:
            continue
        salt = view.table_id.encode()
        erased = erase_keys(
            view, partition, gone, end, config.storage, lock, generation,
            f"keys {topic} erased while the mirror could not read their tombstones",
            partial(ledger.record_reconciled, topic, salt, partition, end - 1, at_ms=at_ms))
        keys += len(erased.keys)
        values += erased.values
        doomed.append(pa.table({"key": gone, "partition": pa.array([partition] * len(gone),
                                                                   pa.int32()),
                                "offset": pa.array([end] * len(gone), pa.int64())}))
    rows = 0
    if doomed:
        source = pa.concat_tables(doomed)
        summary = f"rows of keys {topic} erased while the mirror could not read their tombstones"
        with lock:
            rows += _delete_rows(paths.table, source, config.storage, summary)
            rows += _delete_rows(paths.rejected, source, config.storage, summary)
        everywhere = (pa.concat_arrays(live_anywhere) if live_anywhere
                      else pa.array([], pa.binary()))
        unique = pc.unique(source.column("key").combine_chunks())
        nowhere = unique.filter(pc.invert(pc.is_in(unique, value_set=everywhere)))
        if len(nowhere):
            with lock:
                rows += sum(eraser.erase_keys(topic, nowhere.to_pylist()).values())
    result = Reconciled(topic, at_ms, len(tps), keys, values, rows)
    if keys or rows:
        log.warning("%s: erased from the lake %d key(s) the topic erased while the mirror "
                    "could not read their tombstones (%d log records, %d other rows)",
                    topic, keys, values, rows)
    else:
        log.info("%s: reconciled with the topic's %d partitions; nothing to erase", topic,
                 len(tps))
    return result
