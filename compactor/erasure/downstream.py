"""Carrying tombstones to downstream tables, exactly once, and checking they can meet the
erasure deadline.

Commit protocol of a downstream catch-up, per downstream table D of topic T:

1. Read D's app transactions ``compactor-erase-<T>-<partition>`` (the last log offset whose
   tombstones D has applied, A) and one snapshot of ``L/T/log`` (the offset ingest
   committed, L).
2. Read the tombstones of each partition with A < offset <= L from the log and map their keys
   to D's key column (raw bytes, UTF-8 text, or a field of a JSON key).
3. MERGE a batch of those keys into D on ``t.<key column> = s.k``, deleting every match, in
   one Delta commit that moves each partition's app transaction to L. The predicate names
   columns only: no key reaches D's transaction log. A crash before the commit changes
   nothing; the next catch-up redoes it.

When the range holds no tombstone nothing is committed to D; a position kept in memory saves
re-reading the same range, and a restart re-reads it once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError

from compactor.config import CompactorConfig, DownstreamTable
from compactor.exceptions import ConfigError, LakeError
from compactor.lake import operations
from compactor.lake.layout import open_table, topic_paths
from compactor.lake.log_follower import LogView, log_view
from compactor.lake.range_reader import WrittenTombstones, read_tombstones
from compactor.lake.segments import PartitionLog
from compactor.positions import ERASE

log = logging.getLogger(__name__)

_INTERVAL = re.compile(r"^interval\s+(\d+)\s+(\w+?)s?$", re.IGNORECASE)
_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000,
            "day": 86_400_000, "week": 604_800_000}


def _interval_ms(value: str | None) -> int:
    """Delta's ``interval N unit``; an absent retention is Delta's default of one week."""
    if value is None:
        return _UNIT_MS["week"]
    match = _INTERVAL.match(value.strip())
    if not match or match.group(2).lower() not in _UNIT_MS:
        return _UNIT_MS["week"]
    return int(match.group(1)) * _UNIT_MS[match.group(2).lower()]


def check_downstream(config: CompactorConfig) -> None:
    """Refuse downstream tables that cannot be erased in time (or at all)."""
    for d in config.downstream:
        key = f"downstream.{d.name}.path"
        table = open_table(d.path, config.storage)
        if table is None:
            raise ConfigError(key, d.path, "is not a Delta table", "create it first")
        names = [f.name for f in table.schema().fields]
        if d.key_column not in names:
            raise ConfigError(f"downstream.{d.name}.key.column", d.key_column,
                              f"is not a column of {d.path}", f"columns: {', '.join(names)}")
        props = table.metadata().configuration
        _check_features(d, key, table, props)
        _check_statistics(d, key, table, props)
        tc = config.topic(d.topic)
        if not tc.erasure_deadline:
            continue
        retention = _interval_ms(props.get("delta.deletedFileRetentionDuration"))
        if retention > tc.vacuum_grace_ms:
            raise ConfigError(
                key, d.path,
                f"keeps removed files for {retention} ms (delta.deletedFileRetentionDuration), "
                f"longer than the {tc.vacuum_grace_ms} ms the erasure deadline of {d.topic} "
                f"(max.compaction.lag.ms={tc.max_compaction_lag_ms}) leaves for vacuum",
                f"set delta.deletedFileRetentionDuration to at most "
                f"'interval {tc.vacuum_grace_ms} milliseconds' on that table",
            )
        if props.get("delta.enableChangeDataFeed", "false").lower() == "true":
            raise ConfigError(
                key, d.path, "has its change data feed on, so deleted rows would stay in its "
                "change-data files past the erasure deadline",
                "set delta.enableChangeDataFeed=false on that table",
            )


# Table features a delta-rs MERGE handles in a table Spark wrote, each tried with delta-spark's
# tables in the tests (change data feed is refused apart when on: see check_downstream).
WRITABLE_FEATURES = frozenset({"appendOnly", "invariants", "changeDataFeed", "columnMapping"})


def _check_features(d: DownstreamTable, key: str, table: DeltaTable,
                    props: Mapping[str, str]) -> None:
    """Refuse a table the mirror's deletes cannot write correctly."""
    protocol = table.protocol()
    features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
    if "deletionVectors" in features:
        raise ConfigError(
            key, d.path,
            "uses deletion vectors (table feature deletionVectors), which delta-rs, the "
            "mirror's writer, cannot read: its deletes would bring back rows a deletion "
            "vector hides",
            "on that table run ALTER TABLE ... SET TBLPROPERTIES "
            "('delta.enableDeletionVectors' = false), REORG TABLE ... APPLY (PURGE) and "
            "ALTER TABLE ... DROP FEATURE deletionVectors",
        )
    other = sorted(features - WRITABLE_FEATURES)
    if other:
        raise ConfigError(
            key, d.path,
            f"needs table feature(s) {', '.join(other)}, which the mirror's deletes "
            "(delta-rs) are not known to write correctly",
            f"drop them from that table, or point downstream.{d.name} at a table with only "
            f"{', '.join(sorted(WRITABLE_FEATURES))}",
        )
    if props.get("delta.appendOnly", "false").lower() == "true":
        raise ConfigError(key, d.path, "is append-only (delta.appendOnly=true): no row of it "
                          "can be deleted", "set delta.appendOnly=false on that table")


def physical_column(table: DeltaTable, column: str) -> str:
    """The name ``column`` has in the table's data files: its own, or under column mapping
    the physical name Delta gave it."""
    for f in table.schema().fields:
        if f.name == column:
            return str(f.metadata.get("delta.columnMapping.physicalName", column))
    return column


def statistics_columns(table: DeltaTable, props: Mapping[str, str]) -> list[str]:
    """The top-level columns a table keeps file statistics on, as Delta writers choose them:
    ``delta.dataSkippingStatsColumns``, else the first ``delta.dataSkippingNumIndexedCols``
    (32 by default, -1 for all) leaf columns."""
    named = props.get("delta.dataSkippingStatsColumns")
    if named is not None:
        return [c.strip().strip("`").split(".")[0] for c in named.split(",") if c.strip()]
    indexed = int(props.get("delta.dataSkippingNumIndexedCols", "32"))
    leaves: list[str] = []
    schema = pa.schema(table.schema().to_arrow())
    for f in schema:
        leaves += [f.name] * (len(f.flatten()) if pa.types.is_struct(f.type) else 1)
    chosen = leaves if indexed < 0 else leaves[:indexed]
    return list(dict.fromkeys(chosen))


def _check_statistics(d: DownstreamTable, key: str, table: DeltaTable,
                      props: Mapping[str, str]) -> None:
    """Statistics (min/max per file) live in the table's transaction log, which deleting a row
    does not touch: only the key-free columns the user declared may have them."""
    stats = statistics_columns(table, props)
    if d.key_column in stats:
        raise ConfigError(
            key, d.path,
            f"collects statistics on its key column {d.key_column!r}, so erased keys would "
            "stay in its transaction log",
            "set delta.dataSkippingStatsColumns on that table to columns without the key",
        )
    personal = [c for c in stats if c not in d.stats_columns]
    if personal:
        raise ConfigError(
            key, d.path,
            f"collects statistics on {', '.join(personal)} (min and max per file, kept in its "
            "transaction log for delta.logRetentionDuration whatever rows are deleted), so "
            "values of erased rows would outlive the erasure",
            f"set delta.dataSkippingStatsColumns on that table to columns free of personal data "
            f"and list them in downstream.{d.name}.stats.columns, or set "
            "delta.dataSkippingNumIndexedCols=0",
        )


@dataclass
class DownstreamEraser:
    """Applies each topic's tombstones to its downstream tables (steps 1-3)."""

    config: CompactorConfig
    # table name -> partition -> the last log offset whose tombstones it has taken
    _scanned: dict[str, dict[int, int]] = field(default_factory=dict)
    # (table name, partition) -> why its tombstones could not be read at the last catch-up
    failed: dict[tuple[str, int], str] = field(default_factory=dict)

    def catch_up(self, topic: str, view: LogView | None = None,
                 written: Mapping[int, WrittenTombstones] | None = None,
                 ) -> dict[str, dict[int, int]]:
        """Apply pending tombstones of ``topic``; returns, per downstream table that committed,
        the last log offset it finished for each partition. ``view``: the version of the log
        to read, when the caller has one; ``written``: see
        :meth:`~compactor.erasure.tombstones.TombstoneReaders.catch_up`."""
        targets = [d for d in self.config.downstream if d.topic == topic]
        if targets and view is None:
            view = log_view(topic_paths(self.config.lake_path, topic).log, self.config.storage)
        if not targets or view is None:
            return {}
        finished: dict[str, dict[int, int]] = {}
        for d in targets:
            upto = self._apply(d, view.uri, view.partitions, written or {})
            if upto:
                finished[d.name] = upto
        return finished

    def read_upto(self, name: str) -> dict[int, int]:
        """Per partition, the last log offset downstream table ``name`` has taken the
        tombstones of (as far as this process knows: its last :meth:`catch_up`)."""
        return dict(self._scanned.get(name, {}))

    def _apply(self, d: DownstreamTable, log_uri: str, logs: Mapping[int, PartitionLog],
               written: Mapping[int, WrittenTombstones]) -> dict[int, int]:
        table = open_table(d.path, self.config.storage)
        if table is None:
            raise LakeError(f"downstream table {d.name} at {d.path} is gone; erasures of "
                            f"{d.topic} cannot be carried to it (restore it or remove its "
                            "downstream.* keys)")
        ranges: dict[int, tuple[int, int]] = {}
        scanned = self._scanned.setdefault(d.name, {})
        for partition, plog in logs.items():
            known = scanned.get(partition)
            if plog.committed_offset is None or (
                    known is not None and plog.committed_offset <= known):
                continue  # nothing committed since this process's last look: no lookup
            applied = ERASE.read(table, partition, d.topic)
            lo = max(applied if applied is not None else -1, -1 if known is None else known)
            scanned[partition] = lo
            if plog.committed_offset > lo:
                ranges[partition] = (lo, plog.committed_offset)
        if not ranges:
            return {}
        keys: list[bytes] = []
        for partition, (lo, hi) in list(ranges.items()):
            try:
                rows = read_tombstones(log_uri, logs[partition], lo, hi, ["key"],
                                       self.config.storage, written.get(partition))
            except LakeError as exc:  # this partition waits; the others go on
                self.failed[(d.name, partition)] = str(exc)
                del ranges[partition]
                continue
            self.failed.pop((d.name, partition), None)
            keys += rows.column("key").to_pylist()
        mapped = {v for v in d.key_values(keys) if v is not None}
        if not mapped:  # no tombstone, or none whose key maps to a row: nothing to delete
            scanned.update({p: hi for p, (_, hi) in ranges.items()})
            return {p: hi for p, (_, hi) in ranges.items()} if keys else {}
        txns = [ERASE.moved_to(hi, p, d.topic)
                for p, (_, hi) in ranges.items()]
        try:
            count = _delete_keys(d, table, mapped, txns, f"tombstoned keys of {d.topic} deleted")
        except CommitFailedError:  # another process (compactor clean) applied them first
            log.info("downstream %s moved concurrently; re-reading from its position", d.name)
            return {}
        scanned.update({p: hi for p, (_, hi) in ranges.items()})
        log.info("downstream %s: %d tombstones applied, %d rows deleted", d.name, len(mapped),
                 count)
        return {p: hi for p, (_, hi) in ranges.items()}

    def erase_keys(self, topic: str, keys: list[bytes]) -> dict[str, int]:
        """Delete the rows of ``keys`` from every downstream table of ``topic``, as their
        tombstones would (:mod:`compactor.erasure.reconcile`); no position moves. Returns the
        rows deleted per table."""
        deleted: dict[str, int] = {}
        for d in (d for d in self.config.downstream if d.topic == topic):
            mapped = {v for v in d.key_values(keys) if v is not None}
            table = open_table(d.path, self.config.storage)
            if table is None:
                raise LakeError(f"downstream table {d.name} at {d.path} is gone; erasures of "
                                f"{d.topic} cannot be carried to it")
            if mapped:
                deleted[d.name] = _delete_keys(d, table, mapped, [],
                                               f"keys {d.topic} erased unseen deleted")
        return deleted


def _delete_keys(d: DownstreamTable, table: DeltaTable, mapped: set[object],
                 txns: list[Transaction], summary: str) -> int:
    """Delete the rows whose key column holds one of ``mapped`` by a MERGE (never a literal
    predicate: keys must not reach the Delta log); the rows deleted. CommitFailedError: a
    concurrent commit moved the same position."""
    key_type = _plain(pa.field(table.schema().to_arrow().field(d.key_column)).type)
    source = pa.table({"k": pa.array(sorted(mapped), type=key_type)})  # type: ignore[type-var]
    try:
        metrics = (table.merge(source, predicate=f"t.`{d.key_column}` = s.k",
                               source_alias="s", target_alias="t",
                               commit_properties=operations.properties(
                                   operations.ERASE_DOWNSTREAM, summary, txns))
                   .when_matched_delete().execute())
    except CommitFailedError:
        raise
    except Exception as exc:  # the position stays: the next catch-up redoes the range
        raise LakeError(f"deleting erased keys from {d.path} failed: {exc}") from exc
    return int(metrics.get("num_target_rows_deleted", 0))


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_string_view(t):
        return pa.string()
    return t
