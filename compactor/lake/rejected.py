"""``L/T/rejected``: its rows, the type changes the table's MERGE reports, and their erasure.

Rejected rows hold a record's key and value bytes, so they are a copy of personal data like
every other, kept no longer than the log keeps the value: any newer record of a key (a new
value or a tombstone) removes that key's older rejected rows in the same catch-up that brings
the latest-value table up to it (before that MERGE commits, so the erasure ledger's "table"
step covers both, and a superseded row goes within the table's cadence, inside the topic's
erasure deadline); a row below its partition's log start goes when retention moves it
(:mod:`compactor.lake.retained_rows`); and vacuum deletes the removed files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from compactor.exceptions import LakeError
from compactor.kafka.schema import KAFKA_SCHEMA, TIMESTAMP_TYPE
from compactor.lake import operations
from compactor.lake.layout import REJECTED_SCHEMA, open_table
from compactor.lake.storage import Storage, failure
from compactor.positions import TYPED

NULL_KEY_REASON = "null key on a compacted topic (cleanup.policy contains compact)"
HEADERS_REASON = ("headers unreadable (a header key that is not UTF-8): the record is in the "
                  "log with null headers")

# The kinds of rejection, the ``reason`` label of compactor_records_rejected_total.
NULL_KEY = "null_key"  # kept out of the log
HEADERS = "headers"  # in the log, headers null
UNDECODABLE = "undecodable"  # in the log, not in the latest-value table
TYPE_CHANGE = "type_change"  # a schema the table's columns cannot take (reported at MERGE)
TYPE_CHANGE_WORDS = "a type change cannot be merged"  # in every type change's reason


def rejection_kind(reason: str) -> str:
    """The kind of a ``rejected`` row's reason."""
    if reason == NULL_KEY_REASON:
        return NULL_KEY
    if reason == HEADERS_REASON:
        return HEADERS
    if TYPE_CHANGE_WORDS in reason:
        return TYPE_CHANGE
    return UNDECODABLE


@dataclass(frozen=True)
class Rejections:
    """What one range (or batch) sent to ``rejected``: records per kind, the first reason."""

    counts: Mapping[str, int]
    first: str | None  # "partition P offset O: reason", without what it quotes of the record

    @classmethod
    def combined(cls, parts: Iterable[Rejections]) -> Rejections:
        counts: dict[str, int] = {}
        first = None
        for part in parts:
            for kind, n in part.counts.items():
                counts[kind] = counts.get(kind, 0) + n
            first = first or part.first
        return cls(counts, first)



def rejected_rows(batch: pa.RecordBatch | pa.Table, reasons: list[str | None] | str,
                  schema_ids: list[int | None] | None, now_ms: int) -> pa.Table:
    """Rows of ``L/T/rejected``: the records as they came, with why and when."""
    n = batch.num_rows
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    table = table.select(KAFKA_SCHEMA.names).cast(KAFKA_SCHEMA)
    why = [reasons] * n if isinstance(reasons, str) else reasons
    table = table.append_column("reason", pa.array(why, pa.string()))
    table = table.append_column(
        "rejectedAt", pa.array([now_ms * 1000] * n, pa.int64()).cast(TIMESTAMP_TYPE))
    table = table.append_column("schemaId", pa.array(schema_ids or [None] * n, pa.int32()))
    return table.cast(REJECTED_SCHEMA)


def report_type_changes(path: str, rows: pa.Table, upto: dict[int, int],
                        storage: Storage) -> int:
    """Append ``rows`` (records of an unmergeable schema, in log ranges ending at ``upto``
    per partition) exactly once.

    Protocol, before the MERGE that leaves them out commits: (1) read each partition's
    ``compactor-typed-<p>`` version; (2) drop rows of partitions already reported up to
    their range's end; (3) append the rest in one commit that moves those versions to the
    range ends. A crash after (3) and before the MERGE finds them reported when it redoes
    the catch-up, so nothing is reported twice.
    """
    from deltalake import write_deltalake

    table = open_table(path, storage)
    if table is None:
        return 0
    done = {p for p, hi in upto.items() if (TYPED.read(table, p) or -1) >= hi}
    if done:
        rows = rows.filter(pc.invert(pc.is_in(rows.column("partition"),
                                              pa.array(sorted(done), pa.int32()))))
    todo = {p: hi for p, hi in upto.items() if p not in done}
    if rows.num_rows == 0 or not todo:
        return 0
    count: int = rows.num_rows
    try:
        write_deltalake(
            table, rows, mode="append",
            commit_properties=operations.properties(
                operations.INGEST, f"{rows.num_rows} records of a schema the latest-value "
                "table cannot merge", [TYPED.moved_to(hi, p) for p, hi in todo.items()]))
    except Exception as exc:
        raise LakeError(f"cannot append to {path}: {failure(path, exc)}") from exc
    return count


# The keys each rejected table holds, by the table version they were read at: a catch-up
# reads them again only after the table changed, not at every micro-batch.
_HELD: dict[str, tuple[int, pa.Array]] = {}


def _held_keys(path: str, table: DeltaTable) -> pa.Array:
    version = table.version()
    cached = _HELD.get(path)
    if cached is None or cached[0] != version:
        keys = table.to_pyarrow_dataset().to_table(columns=["key"]).column("key")
        cached = _HELD[path] = (version, pc.unique(keys).cast(pa.binary()))
    return cached[1]


def drop_superseded(path: str, newest: pa.Table, storage: Storage) -> int:
    """Delete the rejected rows that a newer record of the same key follows (``newest``: each
    key's latest record of the range, value or tombstone); returns how many.

    By a MERGE against those records (never a literal predicate: keys must not reach the
    Delta log). A row of another partition is older when its timestamp is not later.
    """
    table = open_table(path, storage)
    if table is None or newest.num_rows == 0:
        return 0
    # Only keys the table holds: no MERGE (and no commit) when none of them has a dead letter.
    held = _held_keys(path, table)
    if len(held) == 0:
        return 0
    source = newest.filter(pc.is_in(newest.column("key"), held))
    if source.num_rows == 0:
        return 0
    source = source.select(["key", "partition", "offset", "timestamp"])
    try:
        metrics = (
            table.merge(source, predicate="t.key = s.key", source_alias="s", target_alias="t",
                        commit_properties=operations.properties(
                            operations.MERGE_LATEST, "rejected rows a newer record superseded",
                            []))
            .when_matched_delete(predicate="(s.partition = t.partition AND t.offset < s.offset)"
                                 " OR (s.partition <> t.partition AND "
                                 "t.timestamp <= s.timestamp)")
            .execute()
        )
    except Exception as exc:
        raise LakeError(f"cannot delete superseded rows from {path}: "
                        f"{failure(path, exc)}") from exc
    return int(metrics.get("num_target_rows_deleted", 0))
