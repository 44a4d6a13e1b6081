"""The mirror: a Structured Streaming query from Kafka into the lake's segment logs.

The source plans offset ranges (``compactor.ranges``) and Spark keeps them in its checkpoint;
``foreachBatch`` hands them to write tasks (one per core, each writing many Kafka partitions)
and commits the files (see :mod:`compactor.ingest.writer` for the commit protocol). Records
never enter the JVM.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from compactor import exceptions as errors
from compactor.config import CompactorConfig
from compactor.erasure.tombstones import TombstoneReaders
from compactor.exceptions import CompactorError
from compactor.formats import exceptions as format_errors
from compactor.ingest.batch_stats import BatchStats, IngestTotals
from compactor.ingest.incarnation import Incarnations
from compactor.ingest.writer import RejectedPositions, commit_ranges, plan_ranges
from compactor.kafka.broker_offsets import OffsetReader
from compactor.lake.latest_table import catch_up
from compactor.lake.layout import topic_paths
from compactor.lake.log_follower import log_view
from compactor.lake.range_reader import WrittenTombstones
from compactor.lake.written_records import WrittenLog
from compactor.positions import query_checkpoint
from compactor.tasks import task_groups, task_pickle
from streaming import exceptions as streaming_errors
from streaming.batch_ranges import BatchRanges
from streaming.consumer import warm_up, write_ranges
from streaming.exceptions import StreamingError, first_line
from streaming.kafka_source import SHORT_NAME
from streaming.offset_planning import EARLIEST, LATEST

log = logging.getLogger(__name__)

QUERY_NAME = "kafka-lake-mirror"


def starting_offsets(config: CompactorConfig) -> str:
    """Where a query without a checkpoint starts: after what the lake already holds.

    The lake, not the checkpoint, is the record of what was mirrored; partitions it does
    not know start at ``starting.offsets``.
    """
    default = LATEST if config.starting_offsets == "latest" else EARLIEST
    reader = OffsetReader(config.kafka_client_config())
    offsets: dict[str, dict[str, int]] = {}
    for topic, partition in reader.partitions(list(config.topics), None):
        offsets.setdefault(topic, {})[str(partition)] = default
    for topic in config.topics:
        view = log_view(topic_paths(config.lake_path, topic).log, config.storage)
        if view is None:
            continue
        for partition, plog in view.partitions.items():
            if plog.committed_offset is not None:
                offsets.setdefault(topic, {})[str(partition)] = plog.committed_offset + 1
    return json.dumps(offsets)


_ERROR_LINE = re.compile(
    r"(?:compactor\.exceptions\.|compactor\.formats\.exceptions\.|streaming\.exceptions\.)?"
    r"(\w+Error): (.+)")
_ERROR_CLASSES: dict[str, type[CompactorError]] = {
    name: cls
    for module in (errors, format_errors, streaming_errors)
    for name, cls in vars(module).items()
    if isinstance(cls, type) and issubclass(cls, CompactorError) and cls is not errors.ConfigError
}


def unwrap_error(exc: BaseException) -> CompactorError:
    """Map an exception raised in a Python worker back to the product's class and message.

    Errors raised by the source or by tasks reach the driver as text inside Spark's
    exception; the last ``<ErrorClass>: message`` line names ours.
    """
    text = str(exc)
    for line in reversed(text.splitlines()):
        match = _ERROR_LINE.search(line)
        cls = _ERROR_CLASSES.get(match.group(1)) if match else None
        if match and cls is not None:
            return cls(match.group(2).strip())
    return StreamingError(f"the streaming query failed: {first_line(exc)}")


def early_merge_s(interval_s: float, trigger_ms: int) -> float:
    """How long before a table is due its MERGE may run between micro-batches: one trigger
    interval (a gap between batches falls in it when the mirror keeps up), at most a quarter
    of the table's interval, so that merging early adds at most a quarter more MERGEs."""
    return min(trigger_ms / 1000, interval_s / 4)


class Mirror:
    """Builds and runs the mirror query for one configuration."""

    def __init__(self, spark: SparkSession, config: CompactorConfig,
                 commit_lock: threading.Lock | None = None) -> None:
        self.spark = spark
        self.config = config
        self.commit_lock = commit_lock or threading.Lock()
        self.totals = IngestTotals()
        self.listeners: list[Callable[[int, Mapping[str, BatchStats]], None]] = []
        # (step, seconds) of each micro-batch (batch, commit) and table MERGE (merge).
        self.timings: list[Callable[[str, float], None]] = []
        self.table_hooks: list[Callable[[str], None]] = []  # a MERGE removed table files
        self.readers = TombstoneReaders(config)
        self.ledger = self.readers.ledger
        self._last_merge: dict[str, float] = {}  # topic -> monotonic time of its last MERGE
        # topic -> (log version, change feed) its table last caught up with: an idle topic's
        # MERGE is then skipped without opening its table.
        self._merged_at: dict[str, tuple[int, bool]] = {}
        self.written = WrittenLog()  # the committed records the next MERGEs read
        self.in_batch = False
        self.failure: BaseException | None = None
        self.generations: dict[str, int] = {}  # this run's writer generations (fencing)
        self.incarnations: Incarnations | None = None  # the topic ids this run mirrors
        self.batch_ranges: BatchRanges | None = None  # each batch's ranges, from start()
        self.warming: threading.Thread | None = None  # the warm-up job of start()
        self._offsets: OffsetReader | None = None  # the broker's log starts, for plans
        self._rejected = RejectedPositions()  # what this run knows of the rejected positions
        # Topics a micro-batch committed whose tombstone readers have not run since, with the
        # tombstones its tasks kept (see carry_tombstones); changed under the commit lock.
        self._uncarried: dict[str, dict[int, WrittenTombstones]] = {}
        self._carried_s = 0.0  # how long the readers took after the last batch, for its log
        self._carry_failed = False  # they failed in the gap: left to the next batch

    def _write_batch(self, df: DataFrame, batch_id: int) -> None:
        self.in_batch = True
        try:
            self._append(df, batch_id)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self.in_batch = False

    def _append(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        assert self.batch_ranges is not None  # set by start(), before any batch
        ranges = self.batch_ranges.ranges(df, batch_id)
        ranged = time.monotonic()
        now_ms = int(time.time() * 1000)
        plans = plan_ranges(self.config, ranges, now_ms, self._log_starts, self._rejected)
        if not plans:
            return
        client = self.config.kafka_client_config()
        fail = self.config.fail_on_data_loss
        planned = time.monotonic()
        # One task per core, each writing several partitions' ranges in turn: a task per
        # Kafka partition cost a Python worker round trip each, so hundreds of partitions
        # made a batch slow however few records it carried. Balanced by records, largest
        # first, so that no core idles while another writes a large range.
        context = self.spark.sparkContext
        sizes = [p.end - p.start for p in plans]
        groups = [[plans[i] for i in g] for g in task_groups(
            sizes, context.defaultParallelism, self.config.min_partitions,
            self.config.max_records_per_partition)]
        groups.sort(key=lambda g: sum(p.end - p.start for p in g), reverse=True)
        # Each task's plans and results travel as one blob of the standard pickle: Spark's
        # cloudpickle visits every object of hundreds of plans and results in Python.
        blobs = [task_pickle(g) for g in groups]
        results = [r for blob in (
            context.parallelize(blobs, len(blobs))
            .map(lambda plans: task_pickle(write_ranges(pickle.loads(plans), client, 120_000,
                                                        fail)))
            .collect()
        ) for r in pickle.loads(blob)]
        collected = time.monotonic()
        # Nothing read from a recreated topic is committed: asked now, checked by the commit.
        check = (self.incarnations.verify({plan.topic for plan in plans})
                 if self.incarnations is not None else None)
        written = time.monotonic()
        with self.commit_lock:
            locked = time.monotonic()
            self._carry()  # readers the gap after the last batch left, before the log moves
            self._carry_failed = False
            carried_left = time.monotonic()
            try:
                stats = commit_ranges(self.config, results, self.generations, check)
            except BaseException:
                self._rejected.forget()  # its rejected commits may have moved positions
                raise
            self.written.add(r.records for r in results if r.records is not None)
            self._rejected.planned(plans)
            committed = time.monotonic()
            for topic in stats:
                self._uncarried[topic] = {}
            for r in results:
                if r.tombstones is not None and r.topic in stats:
                    self._uncarried[r.topic][r.partition] = r.tombstones
        merging = time.monotonic()
        # Only tables that must follow every batch (a cadence of 0) are merged inside it; the
        # others are merged by the service loop, beside the next batch's write tasks.
        self.merge_tables(topics=[t for t in stats if self.config.table_merge_ms(t) == 0])
        done = time.monotonic()
        merge_s, took = done - merging, done - started
        # Where a micro-batch's time goes, for bench/soak.py (a log record's ``steps``).
        steps = {"ranges": ranged - started, "plan": planned - ranged,
                 "write": collected - planned, "verify": written - collected,
                 "wait": locked - written, "commit": committed - carried_left,
                 "readers": carried_left - locked + merging - committed, "table": merge_s}
        records = sum(s.records for s in stats.values())
        log.info("batch %d: %d records, %d rejected, %d files in %.1fs (%.1fs of it merging "
                 "the latest-value table)", batch_id, records,
                 sum(s.rejected for s in stats.values()),
                 sum(s.files for s in stats.values()), took, merge_s,
                 extra={"batch_id": batch_id, "steps": steps, "carried_s": self._carried_s})
        for topic, s in sorted(stats.items()):
            if s.rejected:  # a typo in a schema can send every record here: say so loudly
                kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(s.rejections.counts.items()))
                log.warning("%s: %d record(s) of batch %d went to %s (%s); first: %s", topic,
                            s.rejected, batch_id, topic_paths(self.config.lake_path, topic)
                            .rejected, kinds, s.rejections.first)
        self.totals.add(stats, took, merge_s)
        for timing in self.timings:
            timing("batch", took)
            timing("commit", committed - locked)
        for listener in self.listeners:
            listener(batch_id, stats)

    def _log_starts(self, tps: list[tuple[str, int]]) -> Mapping[tuple[str, int], int]:
        if self._offsets is None:
            self._offsets = OffsetReader(self.config.kafka_client_config())
        return self._offsets.offsets(tps, "earliest")

    def carry_tombstones(self) -> None:
        """Run the tombstone readers (:mod:`compactor.erasure.tombstones`) over what the last
        micro-batch committed, under the commit lock, once no batch runs: the service loop
        calls it in the gap after each batch, before it cleans or merges, so that the batch
        returns without waiting for them. The next batch's commit and a topic's MERGE run
        the readers still left first; a failure here leaves them to the next batch, which
        fails on it as before."""
        if not self._uncarried or self.in_batch or self._carry_failed:
            return
        started = time.monotonic()
        with self.commit_lock:
            try:
                self._carry()
            except CompactorError as exc:
                self._carry_failed = True  # one warning, not one per turn of the loop
                log.warning("the tombstone readers failed after a micro-batch (%s); the next "
                            "batch runs them again", exc)
        self._carried_s = time.monotonic() - started

    def _carry(self, topics: Iterable[str] | None = None) -> None:
        """The readers of ``topics`` (default all) left from the last batch; lock held."""
        for topic in sorted(self._uncarried if topics is None else
                            [t for t in topics if t in self._uncarried]):
            carried = self._uncarried[topic]
            erased = self.readers.catch_up(topic, carried).erased
            del self._uncarried[topic]
            if erased:
                for hook in self.table_hooks:
                    hook(topic)

    def merge_tables(self, force: bool = False, topics: Iterable[str] | None = None) -> None:
        """Bring each latest-value table (of ``topics``, default all) up to its log once it
        is due (``table_merge_ms`` after its last MERGE), or now (``force``).

        The service loop calls it every 200 ms. A table is merged in the last stretch before
        it is due (:func:`early_merge_s`) while no micro-batch runs, so that its MERGE uses the
        idle time between batches rather than the cores of a batch's write tasks; once due it
        is merged beside a running batch too (the batch's commit waits for the MERGEs under
        way, each holding the commit lock for one topic). A micro-batch merges only the tables
        whose cadence is 0 (after every batch), before it returns.
        """
        now = time.monotonic()
        due, early = [], []
        for topic in self.config.topics if topics is None else topics:
            waited = now - self._last_merge.get(topic, -math.inf)
            interval = self.config.table_merge_ms(topic) / 1000
            if force or waited >= interval:
                due.append(topic)
            elif waited >= interval - early_merge_s(interval, self.config.trigger_interval_ms):
                early.append((-waited, topic))
        for topic in due:
            with self.commit_lock:
                self._merge(topic)
        for _, topic in sorted(early):
            if self.in_batch:
                return  # the rest wait for the gap after this batch, or for their due time
            with self.commit_lock:
                self._merge(topic)

    def _merge(self, topic: str) -> None:
        """One topic's catch-up of its latest-value table, under the commit lock; nothing
        when the log has had no commit since the table last caught up with it here."""
        started = time.monotonic()
        self._carry([topic])  # the ledger records a tombstone before the table's done event
        change_feed = self.config.topic(topic).table_change_data_feed
        view = log_view(topic_paths(self.config.lake_path, topic).log, self.config.storage)
        at = None if view is None else (view.version, change_feed)
        if at is not None and self._merged_at.get(topic) == at:
            self._last_merge[topic] = time.monotonic()
            return
        merged = catch_up(self.config.lake_path, topic, self.config.storage,
                          self.config.format(topic), generation=self.generations.get(topic),
                          erase_moved=self.config.cleaner.enable
                          and self.config.topic(topic).compact,
                          change_feed=change_feed, written=self.written)
        self.written.merged(topic, merged.merged_upto)
        if at is not None:  # the lock held since the view: the catch-up read this version
            self._merged_at[topic] = at
        for timing in self.timings:
            timing("merge", time.monotonic() - started)
        if merged.tombstones:
            self.ledger.record_done(topic, "table", merged.merged_upto)
        if merged.updated or merged.deleted or merged.rejected_erased or merged.compacted:
            for hook in self.table_hooks:
                hook(topic)
        self._last_merge[topic] = time.monotonic()

    def error(self, exc: BaseException) -> CompactorError:
        """The product error behind a failed query, unwrapped from Spark's and Py4J's."""
        if isinstance(self.failure, CompactorError):
            return self.failure
        return unwrap_error(exc)

    def start(self, once: bool = False) -> StreamingQuery:
        cfg = self.config
        options = {
            "kafka.bootstrap.servers": cfg.bootstrap_servers,
            "subscribe": ",".join(cfg.topics),
            "startingOffsets": starting_offsets(cfg),
            "failOnDataLoss": str(cfg.fail_on_data_loss).lower(),
            "compactor.ranges": "true",
            # The mirror's own bound on a frozen broker (exit 3 after one 30 s offset request,
            # as before fetchOffset.* existed), not Spark's default of 3 retries.
            "fetchOffset.numRetries": "0",
            **{f"kafka.{key}": value for key, value in cfg.kafka.items()},
        }
        if cfg.max_offsets_per_trigger:
            options["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
        if self.batch_ranges is not None:
            self.batch_ranges.close()
        self.batch_ranges = BatchRanges(self.spark, QUERY_NAME, options)
        reader = self.spark.readStream.format(SHORT_NAME).options(**options)
        writer = (
            reader.load().writeStream.foreachBatch(self._write_batch)
            .option("checkpointLocation", query_checkpoint(cfg.checkpoint_path))
            .queryName(QUERY_NAME)
        )
        trigger: dict[str, Any] = (
            {"availableNow": True} if once
            else {"processingTime": f"{cfg.trigger_interval_ms} milliseconds"}
        )
        self._warm_workers()
        return writer.trigger(**trigger).start()

    def _warm_workers(self) -> None:
        """Fork one Python worker per core and load the write task's modules in it while the
        query starts (its source, its checkpoint, the first offsets), so that the first
        micro-batch does not wait for that."""
        context = self.spark.sparkContext
        n = context.defaultParallelism

        def run() -> None:
            try:
                context.parallelize(range(n), n).map(warm_up).collect()
            except Exception as exc:  # only a head start: the first batch forks them anyway
                log.debug("warming up the Python workers failed: %s", exc)

        self.warming = threading.Thread(target=run, name="warm-python-workers", daemon=True)
        self.warming.start()

    def settle(self, timeout_s: float = 30.0) -> None:
        """Wait for the warm-up job: a session stopped under it kills its workers, which
        Spark logs as two ERROR lines of crashed workers after a run that succeeded."""
        if self.warming is not None:
            self.warming.join(timeout_s)
