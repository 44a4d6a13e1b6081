"""``compactor audit-erasure``: where do superseded values of one key still exist on disk?

The audit trusts no bookkeeping. It walks every file under ``L/T`` (data files of the log, the
latest-value table and rejected records, whether the current snapshot references them or not,
orphans, Delta logs, checkpoints, Spark checkpoints below the lake), decodes Parquet and
searches every other file byte for byte:

- a row of the key whose value a newer record of the key superseded (a later offset of its
  partition, or a later tombstone of another partition: the erasure promise is per key, and
  keys move partition when partitions are added) is a *trace*, due to be gone by the superseding
  record's timestamp + ``max.compaction.lag.ms`` (a record without a
  timestamp, Kafka's -1, counts as written when its data file was, as everywhere in the
  product); on a topic without ``max.compaction.lag.ms`` no deadline applies;
- the key's bytes in any non-data file (a transaction log, a checkpoint) are a trace too, past
  due at once, since nothing the product writes puts them there.

The key's current record (its latest value, or its tombstone) is not a trace, unless the
topic erased the key while the mirror could not read its tombstone: the erasure ledger's
``reconciled`` events (:mod:`compactor.erasure.reconcile`) make every value of the key in that
partition up to the event's offset a trace, due by the event's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from compactor.config import CompactorConfig, DownstreamTable
from compactor.erasure.downstream import physical_column
from compactor.erasure.ledger import ErasureLedger
from compactor.exceptions import LakeError
from compactor.lake.layout import open_table, topic_paths
from compactor.lake.storage import Storage

_ROW_COLUMNS = ["key", "value", "offset", "timestamp", "partition"]


@dataclass(frozen=True)
class Trace:
    path: str
    table: str  # log, table, rejected, other
    partition: int | None
    offset: int | None
    what: str
    deadline_ms: int | None  # None: no deadline applies (the topic sets no max lag)
    never: bool = False  # should never exist: past due at once


@dataclass
class AuditResult:
    topic: str
    key: bytes
    latest: dict[int, tuple[int, int, bool]]  # partition -> (offset, timestamp ms, tombstone)
    traces: list[Trace] = field(default_factory=list)
    files_searched: int = 0

    def overdue(self, now_ms: int) -> list[Trace]:
        return [t for t in self.traces
                if t.never or (t.deadline_ms is not None and t.deadline_ms < now_ms)]

    def status(self, now_ms: int) -> str:
        """erased, overdue, pending (each trace within its deadline) or pending-no-deadline
        (some trace has none: the topic sets no max.compaction.lag.ms)."""
        if self.overdue(now_ms):
            return "overdue"
        if not self.traces:
            return "erased"
        return ("pending-no-deadline" if any(t.deadline_ms is None for t in self.traces)
                else "pending")


def _files(storage: Storage, uri: str,
           ) -> tuple[pafs.FileSystem, str, dict[PurePosixPath, int]]:
    """Every file below ``uri`` (relative to it, in path order) with its modification time
    in ms, on any storage; none when it is absent."""
    fs, root = storage.filesystem(uri)
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        return fs, root, {}
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    base = PurePosixPath(root)
    found = {PurePosixPath(i.path).relative_to(base): (i.mtime_ns or 0) // 1_000_000
             for i in infos if i.type == pafs.FileType.File}
    return fs, root, dict(sorted(found.items()))


def _leaves(array: pa.Array) -> list[pa.Array]:
    """The string and binary leaves of a column, structs and lists opened."""
    if pa.types.is_struct(array.type):
        return [leaf for i in range(array.type.num_fields) for leaf in _leaves(array.field(i))]
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return _leaves(array.flatten())
    if pa.types.is_map(array.type):
        return _leaves(array.keys) + _leaves(array.items)
    return [array] if (pa.types.is_string(array.type) or pa.types.is_binary(array.type)
                       or pa.types.is_large_string(array.type)
                       or pa.types.is_large_binary(array.type)) else []


def _parquet_holds(fs: pafs.FileSystem, path: str, needle: bytes) -> bool:
    """Whether any text or binary value of a Parquet file that is not a data file (a Delta
    checkpoint: statistics as JSON, partition values) contains ``needle``; compressed pages
    hide it from a byte search."""
    try:
        table = _plain(pq.read_table(path, filesystem=fs))
    except Exception:
        data = _read_bytes(fs, path)
        return data is not None and needle in data
    for column in table.columns:
        for leaf in _leaves(column.combine_chunks()):
            for value in leaf.to_pylist():
                text = value.encode() if isinstance(value, str) else value
                if text is not None and needle in text:
                    return True
    return False


def _read_bytes(fs: pafs.FileSystem, path: str) -> bytes | None:
    try:
        with fs.open_input_stream(path) as stream:
            return bytes(stream.read())
    except (OSError, pa.ArrowException):
        return None


def _partition_from_path(path: PurePosixPath) -> int | None:
    for part in path.parts:
        if part.startswith("partition="):
            return int(part.split("=", 1)[1])
    return None


def _rows_of_key(fs: pafs.FileSystem, path: str, key: bytes) -> pa.Table | None:
    """Rows of ``key`` in a data file; None when the file is not a data file with keys."""
    try:
        schema = pq.read_schema(path, filesystem=fs)
    except Exception:
        return None
    if "key" not in schema.names:
        return None
    columns = [c for c in _ROW_COLUMNS if c in schema.names]
    table = _plain(pq.read_table(path, columns=columns, filesystem=fs))
    return table.filter(pc.equal(table.column("key"), pa.scalar(key, pa.binary())))


def _plain(table: pa.Table) -> pa.Table:
    """delta-rs writes binary_view and string_view columns, which few kernels take."""
    fields = [
        pa.field(f.name, pa.binary() if pa.types.is_binary_view(f.type)
                 else pa.string() if pa.types.is_string_view(f.type) else f.type)
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def _table_of(path: PurePosixPath) -> str:
    first = path.parts[0]
    return first if first in ("log", "table", "rejected") else "other"


def audit_key(config: CompactorConfig, topic: str, key: bytes) -> AuditResult:
    root_uri = topic_paths(config.lake_path, topic).root
    fs, root, files = _files(config.storage, root_uri)
    if not files:
        raise LakeError(f"no lake for topic {topic} under {config.lake_path}")
    tc = config.topic(topic)
    lag = tc.erasure_deadline_ms

    rows: list[tuple[PurePosixPath, dict[str, object]]] = []
    other_files: list[PurePosixPath] = []
    result = AuditResult(topic, key, {})
    for path in files:
        result.files_searched += 1
        found = (_rows_of_key(fs, f"{root}/{path}", key) if path.name.endswith(".parquet")
                 else None)
        if found is None:
            other_files.append(path)
            continue
        partition = _partition_from_path(path)
        for row in found.to_pylist():
            if row.get("partition") is None:
                row["partition"] = partition
            rows.append((path, row))

    # The key's history as the lake knows it, per partition: offset -> timestamp, tombstone.
    history: dict[int, dict[int, tuple[int, bool]]] = {}
    for path, row in rows:
        p, o = row["partition"], row["offset"]
        if isinstance(p, int) and isinstance(o, int):
            ts = row.get("timestamp")
            ms = int(ts.timestamp() * 1000) if hasattr(ts, "timestamp") else -1
            if ms < 0:  # no timestamp: written when its data file was
                ms = files[path]
            history.setdefault(p, {})[o] = (ms, row.get("value") is None)
    for p, entries in history.items():
        last = max(entries)
        result.latest[p] = (last, entries[last][0], entries[last][1])

    erased = _reconciled(config, topic, key)
    for path, row in rows:
        p, o = row["partition"], row["offset"]
        if row.get("value") is None or not isinstance(p, int) or not isinstance(o, int):
            continue
        superseding = _superseded_by(history, p, o)
        unseen = [e for e in erased if e["partition"] == p and o <= e["offset"]]
        if unseen:  # the topic erased it; its tombstone never reached the lake
            result.traces.append(Trace(
                str(path), _table_of(path), p, o, "value of a key the topic erased while the "
                f"mirror could not read the tombstone (reconciled at {unseen[0]['atMs']} ms)",
                min((e["deadlineMs"] for e in unseen if e["deadlineMs"] is not None),
                    default=None)))
            continue
        if superseding is None:
            continue  # the key's live value
        by_p, by_o, superseded_at = superseding
        where = f"offset {by_o}" if by_p == p else f"partition {by_p} offset {by_o}"
        result.traces.append(Trace(
            str(path), _table_of(path), p, o, f"value superseded by {where}",
            superseded_at + lag if lag is not None else None,
        ))
    for path in other_files:
        full = f"{root}/{path}"
        data = _read_bytes(fs, full)
        if (data is not None and key in data) or (
                path.name.endswith(".parquet") and _parquet_holds(fs, full, key)):
            result.traces.append(Trace(str(path), _table_of(path),
                                       None, None, "key bytes in a non-data file", None, True))
    current = max(((ts, p, o, tomb) for p, (o, ts, tomb) in result.latest.items()),
                  default=None)  # the key's newest record in the topic: (timestamp, partition)
    deadline = None
    if current is not None and current[3]:
        deadline = current[0] + lag if lag is not None else None
    elif erased:
        deadline = min((e["deadlineMs"] for e in erased if e["deadlineMs"] is not None),
                       default=None)
    if (current is not None and current[3]) or erased:
        for d in config.downstream:
            if d.topic == topic:
                result.traces += _downstream_traces(config.storage, d, key, deadline, result)
    return result


def _reconciled(config: CompactorConfig, topic: str, key: bytes) -> list[dict[str, Any]]:
    """The ledger's ``reconciled`` events of ``key`` (:mod:`compactor.erasure.reconcile`):
    the one record the audit takes from bookkeeping, since no record in the lake says the
    topic erased the key."""
    log = open_table(topic_paths(config.lake_path, topic).log, config.storage)
    if log is None:
        return []
    salt = str(log.metadata().id).encode()
    return ErasureLedger(config).reconciled(topic, salt, key)


def _superseded_by(history: dict[int, dict[int, tuple[int, bool]]], partition: int,
                   offset: int) -> tuple[int, int, int] | None:
    """The first record of the key that supersedes (partition, offset), as (partition, offset,
    timestamp): a later offset of the partition, or a tombstone of another partition that is
    later by (timestamp, partition), the latest-value table's rule (a key moves partition when
    partitions are added; the erasure promise is per key, while a newer value in another
    partition leaves this one, as Kafka does). None: nothing supersedes it."""
    ts = history[partition][offset][0]
    candidates = [(history[partition][o][0], partition, o)
                  for o in history[partition] if o > offset]
    candidates += [(t, p, o) for p, entries in history.items() if p != partition
                   for o, (t, dead) in entries.items() if dead and (t, p) > (ts, partition)]
    if not candidates:
        return None
    first = min(candidates)
    return first[1], first[2], first[0]


def _downstream_traces(storage: Storage, d: DownstreamTable, key: bytes, deadline: int | None,
                       result: AuditResult) -> list[Trace]:
    """Rows of an erased key left in a downstream table (any file, referenced or not)."""
    mapped = d.key_value(key)
    if mapped is None:
        return []
    fs, root, files = _files(storage, d.path)
    table_now = open_table(d.path, storage)
    column_name = d.key_column if table_now is None else physical_column(table_now, d.key_column)
    needle = mapped if isinstance(mapped, bytes) else str(mapped).encode()
    traces = []
    for path in files:
        result.files_searched += 1
        label = f"downstream:{d.name}/{path}"
        if path.name.endswith(".parquet"):
            try:
                table = _plain(pq.read_table(f"{root}/{path}", filesystem=fs))
            except Exception:
                continue
            if column_name not in table.column_names:  # a checkpoint of its transaction log
                if _parquet_holds(fs, f"{root}/{path}", needle):
                    traces.append(Trace(label, f"downstream:{d.name}", None, None,
                                        "key bytes in a non-data file", None, True))
                continue
            column = table.column(column_name)
            hits = pc.sum(pc.equal(column, pa.scalar(mapped).cast(column.type))).as_py()
            if hits:
                traces.append(Trace(label, f"downstream:{d.name}", None, None,
                                    f"{hits} row(s) of an erased key", deadline))
        else:
            data = _read_bytes(fs, f"{root}/{path}")
            if data is not None and needle in data:
                traces.append(Trace(label, f"downstream:{d.name}", None, None,
                                    "key bytes in a non-data file", None, True))
    return traces
