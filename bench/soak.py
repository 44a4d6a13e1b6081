"""The soak: does a continuously running mirror stay flat?

    python bench/soak.py --minutes 30 --rate 400     # a steady producer, trigger 1 s
    python bench/soak.py --preload-files 100000      # a micro-batch over a long history

Continuous mode: the embedded broker, a compacted and a delete-policy topic of 4 partitions
each, a producer writing ``--rate`` records a second to each (updates of ``--keys`` keys, 1%
tombstones on the compacted one) from a process of its own, and ``compactor run``'s engine
with a 1 s trigger, in this process. Every ``--sample`` seconds it records each micro-batch's
time (Spark's own progress reports), the log's data files per partition and per segment,
the ``_delta_log`` files of each table, the resident memory of the driver, its JVM, Spark's
Python workers and the embedded broker (apart: its in-memory store keeps every record
produced), the consumer lag, and the broker's own answer time for ListOffsets. The run's clock
starts at the mirror's first micro-batch. It prints the first 10% of the run against the last
10%, the micro-batch time and memory by tenth of the run, and memory's slope over the run's
second half. Its records go to files in the run's directory as they are made, not into the
driver's memory, which is what it measures.

The producer sends once a second. The embedded broker (Tansu, in memory) answers ListOffsets
and Fetch by walking a partition's record batches (about 0.5 ms per 1,000 batches), where
Apache Kafka looks the offset up in an index; a producer sending ten times a second made the
broker, not the mirror, the part of a micro-batch that grew. The broker row shows what is
left of it.

Preload mode: a log of ``--preload-files`` one-record files (days of micro-batches; the
broker holds the same offsets), then the mirror with the cleaner off ingests a small batch a
second over it, against the same over an empty log; it prints a micro-batch's time in both.

Prints figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

from workloads import create_topic, status_kb, tokio_threads  # noqa: E402

from checkpoints import INGEST  # noqa: E402
from compactor.config import build_config  # noqa: E402
from compactor.ingest.writer import RangeResult, commit_ranges  # noqa: E402
from compactor.kafka.offsets import OffsetReader  # noqa: E402
from compactor.lake.datafiles import write_data_file  # noqa: E402
from compactor.lake.layout import (  # noqa: E402
    KAFKA_SCHEMA,
    LOG_PARTITION_COLUMNS,
    LOG_SCHEMA,
    ensure_table,
    topic_paths,
)
from compactor.lake.log_state import log_view  # noqa: E402
from compactor.lake.storage import LOCAL  # noqa: E402
from compactor.ops.broker import EmbeddedBroker  # noqa: E402
from compactor.ops.native_heap import TRIM_INTERVAL_S, NativeHeapTrimmer  # noqa: E402
from compactor.ops.workload import Record, partition_for, produce  # noqa: E402
from streaming.service import Service  # noqa: E402

PARTITIONS = 4
# A data file's columns: the log's, less the partition columns (they are directories).
LOG_FILE_SCHEMA = pa.schema([f for f in KAFKA_SCHEMA if f.name != "partition"]
                            + [pa.field("deleteHorizonMs", pa.int64())])


def _children(pid: int) -> list[int]:
    """``pid``'s child processes; none once it has exited (a Python worker may, any time)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += _children(child)
    return found


def memory_mb() -> dict[str, float]:
    """Resident memory of this driver, its JVM, Spark's Python workers (the JVM's descendants:
    their sum, how many, the largest, so that more workers and a growing worker differ) and
    the embedded broker, whose in-memory store holds every record produced and so grows by
    design. The broker is the driver's child, not the JVM's: counting every child of the
    driver as a worker (as runs before 2026-11-24 did) put the broker's growth in the
    workers' row."""
    me = os.getpid()
    driver = status_kb(me)
    out = {"driver MB": driver.get("VmRSS", 0) / 1024,
           # the split says whether a rise is memory allocated or library code paged in
           "driver anon MB": driver.get("RssAnon", 0) / 1024,
           "driver file MB": driver.get("RssFile", 0) / 1024,
           "jvm MB": 0.0, "jvm anon MB": 0.0, "workers MB": 0.0, "broker MB": 0.0,
           # delta-rs's tokio blocking pool keeps the threads a burst of reads made: each holds
           # a stack and an allocator cache, so the count is part of the driver's memory story
           "driver threads": float(len(os.listdir(f"/proc/{me}/task"))),
           "driver tokio threads": float(tokio_threads(me))}
    sizes = []
    for pid in _children(me):
        try:
            exe = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if b"java" in exe:
            jvm = status_kb(pid)
            out["jvm MB"] += jvm.get("VmRSS", 0) / 1024
            out["jvm anon MB"] += jvm.get("RssAnon", 0) / 1024
            for worker in _descendants(pid):
                sizes.append(status_kb(worker).get("VmRSS", 0) / 1024)
        elif b"tansu" in exe:
            out["broker MB"] += status_kb(pid).get("VmRSS", 0) / 1024
    out["workers MB"] = sum(sizes)
    return out | {"worker processes": float(len(sizes)),
                  "largest worker MB": max(sizes, default=0.0)}


def lake_files(lake: Path, topic: str,
               ends: dict[tuple[str, int], int]) -> dict[str, float]:
    """The log's files and lag, read through the follower the mirror itself keeps (no table
    opened, no ledger read: the sampler must not add delta-rs work to the process it
    measures; runs before 2026-11-25 opened the log and read the whole erasure ledger, through
    ``collect_status``, every sample), and the ``_delta_log`` files of the log and table."""
    paths = topic_paths(str(lake), topic)
    figures: dict[str, float] = {"files": 0}
    topic_ends = {p: end for (t, p), end in ends.items() if t == topic}
    # Named partitions get an entry even before their first file: their lag is their end.
    view = log_view(paths.log, LOCAL, topic_ends)
    figures["lag"] = float(sum(topic_ends.values()))
    if view is not None:
        per_segment = {(p, seg.base_offset): len(seg.files)
                       for p, plog in view.partitions.items() for seg in plog.segments}
        files = sum(per_segment.values())
        figures["files"] = files
        figures["files/partition"] = files / max(1, len({p for p, _ in per_segment}))
        figures["most files/segment"] = max(per_segment.values(), default=0)
        # Closed: every segment but each partition's newest (the active one collects files
        # until it rolls; consolidation then makes it one).
        newest = {p: max(b for q, b in per_segment if q == p) for p, _ in per_segment}
        figures["most files/closed segment"] = max(
            (n for (p, b), n in per_segment.items() if b != newest[p]), default=0)
        mirrored = {p: 0 if plog.committed_offset is None else plog.committed_offset + 1
                    for p, plog in view.partitions.items()}
        figures["lag"] = float(sum(max(0, end - mirrored[p]) for p, end in topic_ends.items()))
    for name in ("log", "table"):
        log_dir = Path(getattr(paths, name)) / "_delta_log"
        figures[f"{name} _delta_log files"] = (
            len(list(log_dir.iterdir())) if log_dir.exists() else 0)
    return figures


def _produce(bootstrap: str, topics: list[str], rate: int, keys: int, sent: Any,
             stop: Any) -> None:
    """The producer's loop: ``rate`` records a second to each topic, sent once a second."""
    i = 0
    per_tick = max(1, rate)
    while not stop.is_set():
        tick = time.monotonic()
        for topic in topics:
            records = []
            for _ in range(per_tick):
                key = b"user-%06d" % (i * 7919 % keys)
                value = None if "compact" in topic and i % 100 == 0 else b"v" * 100
                records.append(Record(key, value, partition_for(key, PARTITIONS)))
                i += 1
            produce(bootstrap, topic, records)
            with sent.get_lock():
                sent.value += len(records)
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


class Producer:
    """The steady producer, in a process of its own, as a user's producers are. Run in the
    driver (before 2026-11-26), its librdkafka producers, two a second with their threads
    and allocations, were counted in the driver's memory and threads."""

    def __init__(self, bootstrap: str, topics: list[str], rate: int, keys: int) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with a JVM link
        self.stop = context.Event()
        self._sent = context.Value("q", 0)
        self._process = context.Process(
            target=_produce, args=(bootstrap, topics, rate, keys, self._sent, self.stop),
            name="soak-producer", daemon=True)

    def start(self) -> None:
        self._process.start()

    def join(self, timeout: float) -> None:
        self._process.join(timeout)

    @property
    def sent(self) -> int:
        return int(self._sent.value)


def _config(broker: str, work: Path, topics: list[str], **extra: str) -> Any:
    return build_config({
        "bootstrap.servers": broker, "topics": ",".join(topics),
        "lake.path": str(work / "lake"), "checkpoint.path": str(work / "ckpt"),
        "trigger.interval.ms": "1000", "spark.master": "local[2]", "spark.ui.enabled": "false",
        **extra,
    })


class Spool:
    """Records of the run, kept on disk until the report.

    The driver is the process this benchmark measures, and the records it kept in memory
    (Spark's and the mirror's parts of each micro-batch, each sample's figures: ~2 KB a
    micro-batch, about 7 MB an hour) grew it as a leak would. Each record is one JSON line,
    written when it is made; the run keeps only counters."""

    def __init__(self, path: Path) -> None:
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()  # the mirror's thread logs, the sampler's thread samples
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
            self.count += 1

    def read(self) -> list[dict[str, Any]]:
        with self._lock:
            self._file.flush()
        with self._path.open(encoding="utf-8") as lines:
            return [json.loads(line) for line in lines]


class Batches:
    """Each micro-batch's time and parts: Spark's (its progress reports) and the mirror's own
    steps (its batch log record), spooled as they come and merged by batch id at the end."""

    def __init__(self, path: Path) -> None:
        self.spark = Spool(path.with_suffix(".spark.jsonl"))
        self.mirror = Spool(path.with_suffix(".mirror.jsonl"))
        self._last: dict[str, int] = {}  # per query, the last batch id spooled

    def poll(self) -> None:
        """Spool the batches Spark reported since the last poll: each micro-batch's time, and
        Spark's own parts of it (``durationMs``)."""
        from pyspark.sql import SparkSession

        # The engine runs in another thread; the active session is per thread, the default is
        # not.
        session = SparkSession.builder.getOrCreate()
        for query in session.streams.active:
            last = self._last.get(str(query.id), -1)
            for p in query.recentProgress:
                # A trigger that ran a batch has addBatch; an idle one (nothing new) has not.
                # Spark's numInputRows stays 0: the mirror never runs the ranges DataFrame.
                if "addBatch" in p.durationMs and p.batchId > last:
                    self.spark.write({
                        "id": p.batchId, "time": p.durationMs.get("triggerExecution", 0) / 1000,
                        **{f"spark {k}": v / 1000 for k, v in p.durationMs.items()
                           if k != "triggerExecution"}})
                    last = p.batchId
            self._last[str(query.id)] = last

    def load(self) -> tuple[dict[int, float], dict[int, dict[str, float]]]:
        """Each batch's time, and each batch's parts, Spark's and the mirror's."""
        times: dict[int, float] = {}
        parts: dict[int, dict[str, float]] = {}
        for record in self.spark.read():
            times[record["id"]] = record.pop("time")
            parts.setdefault(record.pop("id"), {}).update(record)
        for record in self.mirror.read():
            parts.setdefault(record.pop("id"), {}).update(record)
        return times, parts


class _Steps(logging.Handler):
    """The mirror's own steps of each micro-batch (the ``steps`` of its batch log record)."""

    def __init__(self, spool: Spool) -> None:
        super().__init__(logging.INFO)
        self.spool = spool

    def emit(self, record: logging.LogRecord) -> None:
        steps = getattr(record, "steps", None)
        if steps is not None:
            self.spool.write({"id": record.batch_id,  # type: ignore[attr-defined]
                              **{f"mirror {k}": v for k, v in steps.items()}})


def _capture_steps(spool: Spool) -> logging.Handler:
    """Spool the mirror's batch records; its warnings still print."""
    mirror_log = logging.getLogger("streaming.query")
    mirror_log.setLevel(logging.INFO)
    handler = _Steps(spool)
    mirror_log.addHandler(handler)
    if mirror_log.propagate:
        quiet = logging.StreamHandler()
        quiet.setLevel(logging.WARNING)
        mirror_log.addHandler(quiet)
        mirror_log.propagate = False
    return handler


def _print_parts(parts: dict[int, dict[str, float]], first: list[int],
                 last: list[int] | None = None) -> None:
    """Medians of each part over the batches ``first`` (and ``last``, with the ratio)."""
    keys = sorted({key for i in first + (last or []) for key in parts.get(i, {})})
    for key in keys:
        a = statistics.median(parts.get(i, {}).get(key, 0.0) for i in first)
        if last is None:
            print(f"    {key:<40} {a:>10.3f}")
            continue
        b = statistics.median(parts.get(i, {}).get(key, 0.0) for i in last)
        ratio = f"{b / a:>9.2f}x" if a else f"{'-':>10}"
        print(f"    {key:<40} {a:>10.3f} {b:>10.3f} {ratio}")


def continuous(args: argparse.Namespace, work: Path) -> None:
    with EmbeddedBroker(work / "broker.log") as broker:
        compact, delete = "soak-compact", "soak-delete"
        create_topic(broker.bootstrap_servers, compact, PARTITIONS, cleanup_policy="compact",
                     segment_ms=str(args.segment_ms), max_compaction_lag_ms=str(args.max_lag_ms))
        create_topic(broker.bootstrap_servers, delete, PARTITIONS, cleanup_policy="delete",
                     segment_ms=str(args.segment_ms), retention_ms=str(args.retention_ms))
        producer = Producer(broker.bootstrap_servers, [compact, delete], args.rate, args.keys)
        producer.start()
        service = Service(_config(broker.bootstrap_servers, work, [compact, delete], **{
            "log.cleaner.backoff.ms": "5000",
            f"topic.{delete}.vacuum.grace.ms": str(args.delete_vacuum_grace_ms),
            **dict(args.set)}))
        service.native_heap = NativeHeapTrimmer(  # 0: the run without trims, to compare
            interval_s=args.trim_interval_s if args.trim_interval_s > 0 else float("inf"))
        thread = threading.Thread(target=service.run, daemon=True)
        thread.start()
        samples = Spool(work / "samples.jsonl")
        batches = Batches(work / "batches")
        _capture_steps(batches.mirror)
        offsets = OffsetReader({"bootstrap.servers": broker.bootstrap_servers})
        tps = [(t, p) for t in (compact, delete) for p in range(PARTITIONS)]
        _await_first_batch(thread, batches.mirror)
        started = time.monotonic()
        end = started + args.minutes * 60
        traced: list[Any] = []  # --tracemalloc: snapshots after the first tenth and at the end
        while time.monotonic() < end and thread.is_alive():
            time.sleep(args.sample)
            tenth = started + (end - started) / 10
            if args.tracemalloc and not traced and time.monotonic() > tenth:
                traced.append(tracemalloc.take_snapshot())
            batches.poll()
            ends = offsets.offsets(tps, "latest")
            sample = {"t": time.monotonic() - started,
                      "broker ListOffsets, ms": _list_offsets_ms(offsets, tps),
                      **memory_mb(),
                      "driver trimmed MB": service.native_heap.released_bytes / 2**20}
            for topic in (compact, delete):
                sample |= {f"{topic} {k}": v
                           for k, v in lake_files(work / "lake", topic, ends).items()}
            sample["lag"] = sample[f"{compact} lag"] + sample[f"{delete} lag"]
            samples.write(sample)
            print(f"  {sample['t']:6.0f}s  batches {batches.spark.count:5d}  "
                  f"lag {sample['lag']:7.0f}"
                  f"  files {sample.get(f'{delete} files', 0):5.0f}/"
                  f"{sample.get(f'{compact} files', 0):5.0f}  driver "
                  f"{sample['driver MB']:5.0f} MB {sample['driver threads']:3.0f} threads  jvm "
                  f"{sample['jvm MB']:5.0f} MB  workers "
                  f"{sample['worker processes']:.0f} {sample['workers MB']:5.0f} MB  broker "
                  f"{sample['broker ListOffsets, ms']:5.1f} ms {sample['broker MB']:5.0f} MB",
                  flush=True)
        if traced:
            _python_growth(traced[0], tracemalloc.take_snapshot())
        producer.stop.set()
        producer.join(30)
        service.request_stop()
        thread.join(120)
    times, parts = batches.load()
    _report(samples.read(), times, producer.sent)
    print(f"driver's malloc_trim: {service.native_heap.trims} trims gave back "
          f"{service.native_heap.released_bytes / 2**20:.1f} MB of resident memory in all")
    ids = [i for i in sorted(times) if i in parts]
    k = max(1, len(ids) // 10)
    print(f"\nwhere a micro-batch's time goes, seconds (medians, first and last {k} batches):")
    _print_parts(parts, ids[:k], ids[-k:])


def _await_first_batch(thread: threading.Thread, mirror: Spool,
                       timeout_s: float = 300.0) -> None:
    """Start the run's clock at the mirror's first micro-batch. Before it the service is
    starting (the JVM loading classes, Spark forking its Python workers; the driver ~185 MB at
    10 s against ~270 MB a minute in), and a sample from then in the first tenth measured the
    start, not whether the running mirror stays flat: runs before 2026-11-26 (third session)
    had one such sample, which alone took the driver's first-tenth mean ~5 MB lower. The
    mirror's own batch record (spooled in ``mirror``) says a batch ran without asking Spark,
    whose session this thread must not create before the service has."""
    began = time.monotonic()
    while not mirror.count:
        if not thread.is_alive() or time.monotonic() - began > timeout_s:
            raise SystemExit(f"the mirror ran no micro-batch within {timeout_s:.0f}s of its "
                             "start; its log above says why")
        time.sleep(0.5)
    memory = memory_mb()
    print(f"  first micro-batch {time.monotonic() - began:.0f}s after the start: driver "
          f"{memory['driver MB']:.0f} MB, jvm {memory['jvm MB']:.0f} MB, workers "
          f"{memory['workers MB']:.0f} MB; the run's clock starts now", flush=True)


def _python_growth(before: Any, after: Any, top: int = 25) -> None:
    """Where the driver's Python heap grew between two tracemalloc snapshots: tells growth of
    Python objects (ours, py4j's, pyspark's) from native memory (Arrow, delta-rs, the JVM
    bridge), which tracemalloc does not see."""
    stats = after.compare_to(before, "traceback")
    total = sum(s.size_diff for s in stats)
    print(f"\nPython heap growth after the first tenth: {total / 1e6:+.1f} MB "
          f"({sum(s.size for s in stats) / 1e6:.1f} MB traced now); largest sources:")
    for s in stats[:top]:
        frames = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in s.traceback][-6:]
        print(f"  {s.size_diff / 1e6:+8.2f} MB {s.count_diff:+8d} blocks  "
              + " < ".join(frames[::-1]))


def _list_offsets_ms(offsets: OffsetReader, tps: list[tuple[str, int]]) -> float:
    """The broker's own time for the ListOffsets(latest) a micro-batch's source sends."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        offsets.offsets(tps, "latest")
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _report(samples: list[dict[str, float]], batches: dict[int, float], sent: int) -> None:
    n = max(1, len(samples) // 10)
    first, last = samples[:n], samples[-n:]
    ids = sorted(batches)
    k = max(1, len(ids) // 10)
    t_first = statistics.median(batches[i] for i in ids[:k])
    t_last = statistics.median(batches[i] for i in ids[-k:])
    print(f"\n{sent:,} records produced, {len(ids)} micro-batches with data, "
          f"{len(samples)} samples; first 10% vs last 10% (means of the samples, medians of "
          "the batch times):")
    print(f"  {'measure':<40} {'first':>10} {'last':>10} {'last/first':>10}")
    print(f"  {'micro-batch time, s':<40} {t_first:>10.2f} {t_last:>10.2f} "
          f"{t_last / t_first:>9.2f}x")
    for key in samples[-1]:
        if key == "t":
            continue
        a = statistics.fmean(s.get(key, 0) for s in first)
        b = statistics.fmean(s.get(key, 0) for s in last)
        ratio = f"{b / a:>9.2f}x" if a else f"{'-':>10}"
        print(f"  {key:<40} {a:>10.1f} {b:>10.1f} {ratio}")
    medians = [statistics.median(batches[i] for i in ids[j:j + k])
               for j in range(0, k * 10, k) if ids[j:j + k]]
    print("  micro-batch time by tenth of the run, s: "
          + " ".join(f"{m:.2f}" for m in medians))
    # The first tenth holds the lake's first minutes (no vacuum, no log retention yet): the
    # means of each later tenth show whether a figure keeps growing or has levelled off.
    logs = [key for key in samples[-1] if key.endswith("_delta_log files")]
    for key in ("driver MB", "driver anon MB", "driver file MB", "driver threads",
                "driver tokio threads", "jvm MB",
                "jvm anon MB", "workers MB", "largest worker MB", "broker MB", *logs):
        means = [statistics.fmean(s.get(key, 0) for s in samples[j:j + n])
                 for j in range(0, n * 10, n) if samples[j:j + n]]
        print(f"  {key} by tenth of the run: " + " ".join(f"{m:.0f}" for m in means))
    # A service runs for months: what matters is whether memory still rises once started,
    # so the least-squares slope over the second half of the run, in MB an hour.
    half = samples[len(samples) // 2:]
    if len(half) >= 2:
        hours = [s["t"] / 3600 for s in half]
        slopes = {key: statistics.linear_regression(hours, [s[key] for s in half]).slope
                  for key in ("driver MB", "driver anon MB", "driver file MB", "jvm MB",
                              "workers MB", "largest worker MB", "broker MB")}
        print("  MB an hour over the second half of the run (least-squares slope): "
              + ", ".join(f"{key.removesuffix(' MB')} {v:+.0f}" for key, v in slopes.items()))


def preload(lake: Path, bootstrap: str, topic: str, files: int) -> None:
    """``files`` one-record files, a second apart, in hourly segments of each partition, as a
    long history of micro-batches would leave them; the broker holds the same offsets."""
    config = _config(bootstrap, lake.parent, [topic])
    per_partition = files // PARTITIONS
    produce(bootstrap, topic, [Record(b"p%d-k%d" % (p, o), b"v" * 100, p)
                               for p in range(PARTITIONS) for o in range(per_partition)])
    log_path = topic_paths(str(lake), topic).log
    ensure_table(log_path, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=config.storage)
    now_ms = int(time.time() * 1000)
    chunk = 5000
    for start in range(0, per_partition, chunk):
        results = []
        for p in range(PARTITIONS):
            written = []
            for o in range(start, min(per_partition, start + chunk)):
                row = pa.table({
                    "key": [b"p%d-k%d" % (p, o)], "value": [b"v" * 100], "topic": [topic],
                    "offset": [o], "timestamp": [(now_ms - (per_partition - o) * 1000) * 1000],
                    "timestampType": [0], "headers": [[]], "deleteHorizonMs": [None]},
                    schema=LOG_FILE_SCHEMA)
                segment = o - o % 3600
                written.append(write_data_file(
                    log_path, f"partition={p}/segment={segment}", row, 103, "log",
                    {"partition": str(p), "segment": str(segment)}, storage=config.storage))
            results.append(RangeResult(topic, p, min(per_partition, start + chunk) - 1,
                                       tuple(written)))
        commit_ranges(config, results)
        print(f"  preloaded {min(per_partition, start + chunk) * PARTITIONS:,} files", flush=True)
    _history_read(config, topic, per_partition)


def _history_read(config: Any, topic: str, per_partition: int) -> None:
    """What the readers of a long-running mirror left behind: a latest-value table holding
    every key, merged up to the log's end, and an erasure ledger scanned as far (the preload
    has no tombstones). Without them the first micro-batch would be a one-time catch-up over
    the whole history, not the steady cost this mode measures."""
    from deltalake import write_deltalake

    from checkpoints import LEDGER, TABLE
    from compactor.erasure.ledger import LEDGER_PROPERTIES, LEDGER_SCHEMA
    from compactor.lake import operations
    from compactor.lake.layout import TABLE_PROPERTIES_LATEST

    paths = topic_paths(config.lake_path, topic)
    now_ms = int(time.time() * 1000)
    last = per_partition - 1
    n = PARTITIONS * per_partition
    rows = pa.table({
        "key": [b"p%d-k%d" % (p, o) for p in range(PARTITIONS) for o in range(per_partition)],
        "value": [b"v" * 100] * n, "topic": [topic] * n,
        "partition": [p for p in range(PARTITIONS) for _ in range(per_partition)],
        "offset": [o for _ in range(PARTITIONS) for o in range(per_partition)],
        "timestamp": [(now_ms - (per_partition - o) * 1000) * 1000
                      for _ in range(PARTITIONS) for o in range(per_partition)],
        "timestampType": [0] * n, "headers": [[]] * n},
        schema=KAFKA_SCHEMA)
    ensure_table(paths.table, KAFKA_SCHEMA, None, TABLE_PROPERTIES_LATEST,
                 storage=config.storage)
    write_deltalake(paths.table, rows, mode="append", commit_properties=operations.properties(
        operations.MERGE_LATEST, "preloaded history",
        [TABLE.moved_to(last, p) for p in range(PARTITIONS)]))
    ledger = ensure_table(f"{paths.root}/erasures", LEDGER_SCHEMA, None, LEDGER_PROPERTIES,
                          storage=config.storage)
    write_deltalake(ledger, LEDGER_SCHEMA.empty_table(), mode="append",
                    commit_properties=operations.properties(
                        operations.RECORD_ERASURES, "preloaded history",
                        [LEDGER.moved_to(last, p) for p in range(PARTITIONS)]))


def fixed_cost(args: argparse.Namespace, work: Path) -> None:
    from deltalake import DeltaTable

    figures = {}
    with EmbeddedBroker(work / "broker.log") as broker:
        for name, files in (("empty", 0), ("preloaded", args.preload_files)):
            topic = f"soak-{name}"
            create_topic(broker.bootstrap_servers, topic, PARTITIONS, cleanup_policy="delete")
            home = work / name
            if files:
                t0 = time.monotonic()
                preload(home / "lake", broker.bootstrap_servers, topic, files)
                log_path = topic_paths(str(home / "lake"), topic).log
                print(f"  {files:,} files in {time.monotonic() - t0:.0f}s; ingest position of "
                      f"partition 0: {INGEST.read(DeltaTable(log_path), 0)}")
            producer = Producer(broker.bootstrap_servers, [topic], args.rate, args.keys)
            producer.start()
            service = Service(_config(broker.bootstrap_servers, home, [topic], **{
                "log.cleaner.enable": "false", "segment.ms": "3600000", **dict(args.set)}))
            thread = threading.Thread(target=service.run, daemon=True)
            thread.start()
            batches = Batches(home / "batches")
            handler = _capture_steps(batches.mirror)
            end = time.monotonic() + args.fixed_seconds
            while time.monotonic() < end:
                time.sleep(2)
                batches.poll()
            producer.stop.set()
            producer.join(30)
            service.request_stop()
            thread.join(120)
            times, parts = batches.load()
            steady = [times[i] for i in sorted(times)[3:]]  # past the query's warm-up
            figures[name] = statistics.median(steady) if steady else float("nan")
            print(f"  {name}: {len(steady)} micro-batches, median {figures[name]:.2f}s; "
                  "its parts (medians, seconds):")
            _print_parts(parts, [i for i in sorted(times)[3:] if i in parts])
            logging.getLogger("streaming.query").removeHandler(handler)
    print(f"\na micro-batch over {args.preload_files:,} files: {figures['preloaded']:.2f}s, over "
          f"an empty log: {figures['empty']:.2f}s, "
          f"{figures['preloaded'] / figures['empty']:.2f}x")


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=400, help="records/s per topic")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--segment-ms", type=int, default=60_000)
    parser.add_argument("--retention-ms", type=int, default=300_000)
    parser.add_argument("--max-lag-ms", type=int, default=120_000)
    parser.add_argument(
        "--delete-vacuum-grace-ms", type=int, default=300_000,
        help="the delete topic's vacuum.grace.ms (its default is an hour; the compact topic's "
             "is max lag / 4): a table's log retention is the grace, at least 10 minutes, so "
             "this lets a 30-minute run reach the level its _delta_log files keep")
    parser.add_argument("--preload-files", type=int, default=0,
                        help="fixed-cost mode: a log of this many files against an empty one")
    parser.add_argument("--fixed-seconds", type=float, default=60.0)
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="trace the driver's Python allocations (this many frames each) and "
                             "print where they grew after the first tenth (slows the driver)")
    parser.add_argument("--trim-interval-s", type=float, default=TRIM_INTERVAL_S,
                        help="how often the driver gives freed native memory back (the "
                             "service's default); 0: never, to compare (glibc's thresholds are "
                             "fixed either way)")
    parser.add_argument("--set", type=_setting, action="append", default=[],
                        metavar="KEY=VALUE",
                        help="a configuration key for the mirror (repeatable), to take one part "
                             "out of a run: --set log.cleaner.enable=false")
    args = parser.parse_args()
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        if args.preload_files:
            fixed_cost(args, Path(tmp))
        else:
            continuous(args, Path(tmp))
    os._exit(0)  # skip native teardown (see compactor.cli.main.entry)


if __name__ == "__main__":
    main()
