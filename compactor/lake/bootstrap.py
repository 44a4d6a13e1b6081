"""Bootstrap from the lake, then tail Kafka: snapshots of a topic with their exact end offsets.

A Kafka Streams KTable or a Samza store restores itself by reading a compacted topic from the
beginning and then following it. The lake holds the same compacted log, so an application can
read it from there (no load on the brokers) and hand over to Kafka at the offsets where the
snapshot ends:

    snap = open_log("/data/lake", "users")
    for batch in snap.batches():          # Arrow record batches, offset order per partition
        apply(batch)
    consumer = snap.consumer("broker:9092", {"group.id": "restore"})  # assigned to the ends
    # consume as usual: snapshot + tail == the topic read from offset 0

Why the hand-over is exact: every ingest commit moves the app transaction
``compactor-ingest-<p>`` to the last offset it handled (records, rejected records, aborted
transactions and their markers), in the same Delta commit as the files, so one version's
transaction plus one is the next offset the log does not cover. The cleaner only removes
records that a later record of the same key (or an expired tombstone) supersedes, exactly the
records Kafka's compaction may remove, so replaying the snapshot and then the tail gives the
state a reader of the whole topic gets. As in Kafka, a tombstone older than
``delete.retention.ms`` may be gone; a reader that keeps state only needs its absence.

A snapshot pins one Delta version. Files it needs may be vacuumed ``vacuum.grace.ms`` after a
newer version replaced them; a read that outlives that fails with a LakeError, and opening a
new snapshot resumes it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from compactor.exceptions import BrokerUnavailableError, LakeError
from compactor.kafka.clients import with_logger
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.app_transactions import position_lookup
from compactor.lake.layout import (
    join,
    read_table,
    topic_paths,
)
from compactor.lake.segments import PartitionLog, read_partition_logs
from compactor.lake.storage import LOCAL, Storage
from compactor.positions import INGEST, TABLE

_FILE_COLUMNS = [f.name for f in KAFKA_SCHEMA if f.name != "partition"]


def _open(path: str, what: str, version: int | None, storage: Storage) -> DeltaTable:
    try:
        return storage.table(path, version)
    except Exception as exc:
        raise LakeError(
            f"cannot open the {what} {path}"
            f"{'' if version is None else f' at version {version}'}: {exc} "
            "(has 'compactor run' mirrored this topic into this lake yet?)"
        ) from exc


@dataclass(frozen=True)
class LogSnapshot:
    """The compacted log of one topic at one Delta version of ``L/T/log``."""

    topic: str
    log_uri: str
    version: int
    partitions: Mapping[int, PartitionLog]
    storage: Storage = LOCAL

    @property
    def next_offsets(self) -> dict[int, int]:
        """Per partition the first offset the snapshot does not cover: where to consume next."""
        return {p: (log.committed_offset + 1 if log.committed_offset is not None else 0)
                for p, log in self.partitions.items()}

    def batches(self, from_offsets: Mapping[int, int] | None = None,
                partitions: list[int] | None = None) -> Iterator[pa.RecordBatch]:
        """The log's records in offset order, partition after partition (Kafka's schema).

        ``from_offsets`` starts a partition at an offset; one compaction removed yields the
        next record that exists, as a Kafka fetch does, and one below the log start yields
        the log start (``auto.offset.reset=earliest``).
        """
        starts = dict(from_offsets or {})
        for partition in sorted(partitions if partitions is not None else self.partitions):
            plog = self.partitions.get(partition)
            if plog is None:
                continue
            start = starts.get(partition, 0)
            files = sorted((f for seg in plog.segments for f in seg.files),
                           key=lambda f: f.first_offset)
            for f in files:
                if f.last_offset < start:
                    continue
                table = self._read_file(f.path)
                if f.first_offset < start:
                    table = table.filter(pc.greater_equal(table.column("offset"), start))
                if not table.num_rows:
                    continue
                table = table.sort_by("offset").add_column(
                    KAFKA_SCHEMA.get_field_index("partition"), KAFKA_SCHEMA.field("partition"),
                    pa.array([partition] * table.num_rows, pa.int32()))
                yield from table.select(KAFKA_SCHEMA.names).cast(KAFKA_SCHEMA).to_batches()

    def read(self, from_offsets: Mapping[int, int] | None = None) -> pa.Table:
        """All of :meth:`batches` as one table."""
        return pa.Table.from_batches(list(self.batches(from_offsets)), schema=KAFKA_SCHEMA)

    def _read_file(self, relative: str) -> pa.Table:
        path = join(self.log_uri, relative)
        fs, where = self.storage.filesystem(path)
        try:
            return pq.read_table(where, columns=_FILE_COLUMNS, filesystem=fs)
        except (OSError, pa.ArrowException) as exc:
            # Object stores do not all raise FileNotFoundError for a missing object: ask.
            if fs.get_file_info(where).type != pafs.FileType.NotFound:
                raise LakeError(f"cannot read {path} of snapshot version {self.version}: "
                                f"{exc}") from exc
            raise LakeError(
                f"{path}: a file of snapshot version {self.version} of {self.log_uri} was "
                "vacuumed (a newer version replaced it more than vacuum.grace.ms ago); open a "
                "new snapshot and read again, or raise vacuum.grace.ms above your read time"
            ) from exc

    def consumer(self, bootstrap_servers: str, config: Mapping[str, Any] | None = None) -> Any:
        """A confluent-kafka Consumer assigned to this snapshot's end offsets: the tail.

        Partitions the lake has not seen yet start at the beginning. ``config`` adds
        librdkafka settings; ``isolation.level`` defaults to ``read_committed``, as the mirror
        reads, and offsets are not committed unless you ask (the snapshot is the position).
        """
        return assigned_consumer(self.topic, self.next_offsets, bootstrap_servers, config)


@dataclass(frozen=True)
class LatestSnapshot:
    """The latest-value table ``L/T/table`` at one version: one row per live key."""

    topic: str
    version: int
    table: pa.Table
    next_offsets: dict[int, int]  # per partition: the first log offset not merged

    def consumer(self, bootstrap_servers: str, config: Mapping[str, Any] | None = None) -> Any:
        """A Consumer assigned to where the table ends; see :meth:`LogSnapshot.consumer`."""
        return assigned_consumer(self.topic, self.next_offsets, bootstrap_servers, config)


def open_log(lake_path: str, topic: str, version: int | None = None,
             storage_options: Mapping[str, str] | None = None) -> LogSnapshot:
    """Pin the topic's compacted log at ``version`` (default: the newest).

    ``storage_options``: delta-rs's, for a lake on object storage (as ``lake.storage.*``).
    """
    storage = Storage(dict(storage_options or {}))
    log_uri = topic_paths(lake_path, topic).log
    table = _open(log_uri, "log", version, storage)
    position = position_lookup(table, log_uri, storage)
    logs = read_partition_logs(table, position=position)
    # A partition whose records retention removed keeps its ingest transaction: probe the
    # partition numbers up to the highest with files, and past it while transactions exist.
    probe = set(range(max(logs) + 1)) if logs else set()
    while position(INGEST.id(len(probe))) is not None:
        probe.add(len(probe))
    if probe - set(logs):
        logs = read_partition_logs(table, probe, position)
    return LogSnapshot(topic, log_uri, table.version(), logs, storage)


def open_latest(lake_path: str, topic: str, version: int | None = None,
                storage_options: Mapping[str, str] | None = None) -> LatestSnapshot:
    """Pin the topic's latest-value table; its end offsets come from the same version."""
    storage = Storage(dict(storage_options or {}))
    paths = topic_paths(lake_path, topic)
    table = _open(paths.table, "latest-value table", version, storage)
    rows = read_table(table)
    # Every partition the log knows; one the table never merged starts at offset 0.
    log_table = _open(paths.log, "log", None, storage)
    partitions = set(read_partition_logs(log_table, position=position_lookup(
        log_table, paths.log, storage)))
    if rows.num_rows:
        partitions.update(pc.unique(rows.column("partition")).to_pylist())
    ends = {}
    merged_at = position_lookup(table, paths.table, storage)
    for p in sorted(partitions):
        merged = merged_at(TABLE.id(p))
        ends[p] = merged + 1 if merged is not None else 0
    return LatestSnapshot(topic, table.version(), rows, ends)


def assigned_consumer(topic: str, next_offsets: Mapping[int, int], bootstrap_servers: str,
                      config: Mapping[str, Any] | None = None) -> Any:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers, "group.id": f"compactor-bootstrap-{topic}",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",  # an offset below the broker's log start
        "fetch.queue.backoff.ms": 10,  # as the mirror's consumer: see streaming.consumer
        **(config or {}),
    }
    consumer = Consumer(with_logger(settings))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
    except KafkaException as exc:
        consumer.close()
        raise BrokerUnavailableError(
            f"cannot reach Kafka at {bootstrap_servers} to hand over {topic!r}: {exc}") from exc
    known = metadata.topics.get(topic)
    if known is None or known.error is not None or not known.partitions:
        consumer.close()
        raise LakeError(f"topic {topic!r} is not on the broker {bootstrap_servers}: "
                        f"{getattr(known, 'error', None) or 'no partitions'}")
    consumer.assign([TopicPartition(topic, p, next_offsets.get(p, OFFSET_BEGINNING))
                     for p in sorted(known.partitions)])
    return consumer
