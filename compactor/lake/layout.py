"""The lake layout, a public contract: paths, schemas and table properties.

For topic ``T`` under lake root ``L``: ``L/T/log`` (the compacted log, partitioned by
``partition`` and ``segment``), ``L/T/table`` (latest values), ``L/T/rejected`` (records that
cannot enter a compacted log, with the reason).
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from compactor.exceptions import LakeError
from compactor.kafka.schema import KAFKA_FIELDS, TIMESTAMP_TYPE
from compactor.lake import operations
from compactor.lake.storage import Storage, failure, is_local, local_path

LOG_SCHEMA = pa.schema(
    [*KAFKA_FIELDS, pa.field("segment", pa.int64()), pa.field("deleteHorizonMs", pa.int64())]
)
LOG_PARTITION_COLUMNS = ["partition", "segment"]
REJECTED_SCHEMA = pa.schema(
    [*KAFKA_FIELDS, pa.field("reason", pa.string()), pa.field("rejectedAt", TIMESTAMP_TYPE),
     pa.field("schemaId", pa.int32())]  # the registry schema id a record named, if any
)

# Statistics may name these columns only: key and value bytes in the transaction log would
# outlive every erasure of the data files.
STATS_COLUMNS = ("partition", "segment", "offset", "timestamp", "deleteHorizonMs")
# Log hygiene for tables that take a commit every micro-batch (86,400 a day at a 1 s trigger): a
# checkpoint every CHECKPOINT_INTERVAL commits (delta-rs writes it after the commit), and commit
# files older than the log retention deleted when a checkpoint is written. Ten, not delta-rs's 100:
# delta-rs reads every commit since the last checkpoint at once, each read a task of its tokio
# runtime's blocking pool, and the pool keeps every thread such a burst made for as long as any
# work reaches it within 10 s, which in a running mirror is forever
# (``bench/checkpoint_threads.py``). Our transaction logs hold no key or value bytes (statistics
# and predicates above), so the retention is about size, not erasure. It is the vacuum grace, at
# least LOG_RETENTION_FLOOR_MS (set by each vacuum,
# :func:`compactor.cleaner.vacuum.ensure_properties`; one hour, the longest default grace, until
# then): a version older than the grace has had its data files vacuumed, so time travel to it has
# nothing to read, while every commit file kept is listed again by each open and each commit
# (delta-rs lists ``_delta_log``). The floor leaves a reader that is part-way through loading a
# snapshot the commit files it listed.
LOG_RETENTION_FLOOR_MS = 600_000
CHECKPOINT_INTERVAL = 10
LOG_HYGIENE = {
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
    "delta.logRetentionDuration": "interval 1 hours",
    # delta-rs would delete expired commit files after any commit; two threads committing to
    # one table then deleted the same file and one failed. The maintenance pass and the log's
    # own checkpoint step clean up instead, one at a time, under the commit lock.
    "delta.enableExpiredLogCleanup": "false",
}
CHANGE_FEED = "delta.enableChangeDataFeed"
# Where Delta writers put the change data feed's files, inside the table's folder.
CHANGE_DATA_DIR = "_change_data"
TABLE_PROPERTIES = {
    "delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS),
    CHANGE_FEED: "false",
    **LOG_HYGIENE,
}
TABLE_PROPERTIES_LATEST = {
    "delta.dataSkippingStatsColumns": "partition,offset,timestamp",
    CHANGE_FEED: "false",
    **LOG_HYGIENE,
}

# Delta app transaction ids, one per writer role and Kafka partition; the version is the
# role's position: ingest = last offset written, cleaner = first dirty offset (checkpoint).

_FILE_NAME = re.compile(r"^(\d{20})-(\d{20})\.(\d+)b\.[0-9a-f]+\.parquet$")


@dataclass(frozen=True)
class TopicPaths:
    """Where one topic's tables live."""

    root: str
    log: str
    table: str
    rejected: str


def join(base: str, *parts: str) -> str:
    """Join URI or path segments with '/', keeping ``s3://`` style prefixes intact."""
    out = base.rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def topic_paths(lake_path: str, topic: str) -> TopicPaths:
    root = join(lake_path, topic)
    return TopicPaths(
        root=root, log=join(root, "log"), table=join(root, "table"),
        rejected=join(root, "rejected"),
    )


def data_file_name(first_offset: int, last_offset: int, record_bytes: int) -> str:
    """Name a data file so that its record bytes survive in the Delta log.

    delta-rs hands back add paths but not custom statistics keys, and ``segment.bytes`` counts
    record bytes (key + value + headers), so the name carries them:
    ``<first offset>-<last offset>.<record bytes>b.<random>.parquet``.
    """
    return f"{first_offset:020d}-{last_offset:020d}.{record_bytes}b.{uuid.uuid4().hex[:16]}.parquet"


def record_bytes_of(path: str, size_bytes: int) -> int:
    """Record bytes of a data file; files named by other writers count their on-disk size."""
    match = _FILE_NAME.match(path.rsplit("/", 1)[-1])
    return int(match.group(3)) if match else size_bytes


def open_table(path: str, storage: Storage) -> DeltaTable | None:
    """The table at ``path``, or None when no table has been created there yet."""
    if "://" not in path and not os.path.isdir(os.path.join(path, "_delta_log")):
        return None  # a plain local path without a log: no need for delta-rs to say so
    try:
        return storage.table(path)
    except TableNotFoundError:
        return None
    except Exception as exc:  # delta-rs raises several classes for a broken log
        raise LakeError(f"cannot read Delta table {path}: {exc}") from exc


def read_table(table: DeltaTable, columns: list[str] | None = None) -> pa.Table:
    """A table's current rows. Through a pyarrow dataset: with deltalake 1.6.6 and pyarrow 26,
    ``DeltaTable.to_pyarrow_table()`` makes the process abort at exit ("terminate called
    without an active exception"), which would turn exit codes into 134."""
    return table.to_pyarrow_dataset().to_table(columns=columns)


def ensure_rejected(path: str, *, storage: Storage) -> DeltaTable:
    """``L/T/rejected``, created, or given the ``schemaId`` column tables made before typed
    formats lack (a metadata-only change; old rows read it as null)."""
    table = ensure_table(path, REJECTED_SCHEMA, None, storage=storage)
    if "schemaId" not in table.schema().to_arrow().names:
        from deltalake.schema import Field, PrimitiveType

        try:
            table.alter.add_columns([Field("schemaId", PrimitiveType("integer"), nullable=True)])
        except Exception as exc:
            raise LakeError(f"cannot add column schemaId to {path}: {exc}") from exc
        table = storage.table(path)
    return table


def ensure_table(path: str, schema: pa.Schema, partition_by: list[str] | None,
                 properties: dict[str, str] | None = None,
                 *, storage: Storage) -> DeltaTable:
    """Open the table, creating it (empty, with the product's properties) when absent."""
    table = open_table(path, storage)
    if table is not None:
        return table
    if is_local(path):
        try:
            os.makedirs(local_path(path), exist_ok=True)
        except OSError as exc:
            raise LakeError(
                f"cannot create lake directory {path}: {exc.strerror or exc} "
                "(check lake.path and its permissions)"
            ) from exc
    try:
        return DeltaTable.create(
            path, schema, partition_by=partition_by,
            configuration=properties if properties is not None else TABLE_PROPERTIES,
            mode="ignore", storage_options=storage.delta_options(path),
            commit_properties=operations.properties(
                operations.CREATE_TABLE, f"table created by kafka-lake-compactor at {path}"),
        )
    except Exception as exc:
        raise LakeError(f"cannot create Delta table {path}: {failure(path, exc)}") from exc


def update_properties(table: DeltaTable, wanted: dict[str, str], summary: str) -> bool:
    """Set the properties of ``wanted`` the table holds otherwise, in one commit that says
    ``summary`` and the values; whether anything changed."""
    current = table.metadata().configuration
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if changed:
        table.alter.set_table_properties(changed, commit_properties=operations.properties(
            operations.SET_PROPERTIES, f"{summary}: "
            + ", ".join(f"{k}={v}" for k, v in sorted(changed.items()))))
    return bool(changed)
