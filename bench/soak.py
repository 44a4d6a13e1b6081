"""The soak: does a continuously running mirror stay flat?

    python bench/soak.py --minutes 30 --rate 400     # a steady producer, trigger 1 s
    python bench/soak.py --preload-files 100000      # a micro-batch over a long history

Continuous mode: the broker (``--broker``: Apache Kafka by default, whose cleaner and retention
act on the source topics as in production, or the demo's Tansu), a compacted and a delete-
policy topic of 4 partitions each, a producer writing ``--rate`` records a second to each
(updates of ``--keys`` keys, 1% tombstones on the compacted one) from a process of its own, and
``compactor run``'s engine with a 1 s trigger, in this process. Every ``--sample`` seconds it
records each micro-batch's time (Spark's own progress reports), the log's data files per
partition and per segment, the ``_delta_log`` files of each table, the resident memory of the
driver, its JVM, Spark's Python workers and the broker (apart: Tansu's in-memory store keeps
every record produced), the consumer lag, and the broker's own answer time for ListOffsets. The
run's clock starts at the mirror's first micro-batch. It prints the first 10% of the run
against the last 10%, the micro-batch time and memory by tenth of the run, and memory's slope
over the run's second half. Its records go to files in the run's directory as they are made,
not into the driver's memory, which is what it measures.

The producer sends once a second. Tansu answers ListOffsets and Fetch by walking a
partition's record batches, where Apache Kafka looks the offset up in an index: on Tansu the
broker, not the mirror, is the part of a micro-batch that grows (bench/README.md). The broker
row shows it.

Preload mode: a log of ``--preload-files`` one-record files (days of micro-batches; the
broker holds the same offsets), then the mirror with the cleaner off ingests a small batch a
second over it, against the same over an empty log; it prints a micro-batch's time in both.

Prints figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from compactor.ops.arrow_pool import pick_arrow_pool  # noqa: E402

# Arrow's own pool as `compactor run` picks it, before anything here loads pyarrow
pick_arrow_pool(os.environ)

from soak_preload import fixed_cost  # noqa: E402
from soak_probes import lake_files, list_offsets_ms, memory_mb  # noqa: E402
from soak_producer import PARTITIONS, Producer, mirror_config  # noqa: E402
from soak_records import Batches, Spool, capture_steps, print_parts  # noqa: E402
from workloads import BROKERS, create_topic, start_broker  # noqa: E402

from compactor.kafka.broker_offsets import OffsetReader  # noqa: E402
from compactor.ops.native_heap import TRIM_INTERVAL_S, NativeHeapTrimmer  # noqa: E402
from streaming.service import Service  # noqa: E402


def continuous(args: argparse.Namespace, work: Path) -> None:
    with start_broker(args.broker, work) as broker:
        compact, delete = "soak-compact", "soak-delete"
        create_topic(broker.bootstrap_servers, compact, PARTITIONS, cleanup_policy="compact",
                     segment_ms=str(args.segment_ms), max_compaction_lag_ms=str(args.max_lag_ms))
        create_topic(broker.bootstrap_servers, delete, PARTITIONS, cleanup_policy="delete",
                     segment_ms=str(args.segment_ms), retention_ms=str(args.retention_ms))
        producer = Producer(broker.bootstrap_servers, [compact, delete], args.rate, args.keys)
        producer.start()
        service = Service(mirror_config(broker.bootstrap_servers, work, [compact, delete], **{
            "log.cleaner.backoff.ms": "5000",
            f"topic.{delete}.vacuum.grace.ms": str(args.delete_vacuum_grace_ms),
            **dict(args.set)}))
        service.native_heap = NativeHeapTrimmer(  # 0: the run without trims, to compare
            interval_s=args.trim_interval_s if args.trim_interval_s > 0 else float("inf"))
        thread = threading.Thread(target=service.run, daemon=True)
        thread.start()
        samples = Spool(work / "samples.jsonl")
        batches = Batches(work / "batches")
        capture_steps(batches.mirror)
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
                      "broker ListOffsets, ms": list_offsets_ms(offsets, tps),
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
    print_parts(parts, ids[:k], ids[-k:])


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


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--broker", choices=BROKERS, default="kafka",
                        help="Apache Kafka (a KRaft node) or the demo's embedded Tansu")
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
    os._exit(0)  # skip native teardown (see compactor.cli.main.console)


if __name__ == "__main__":
    main()
