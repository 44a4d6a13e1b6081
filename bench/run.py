"""The benchmark: W1-W4 beside the raw limits, Kafka's cleaner model and the naive baseline.

    python bench/run.py            # the full run, ~10 minutes on 2 cores
    python bench/run.py --quick    # a tenth of the records, for trying it out

One broker (``--broker``: Apache Kafka by default, or the demo's Tansu), one Spark session,
one seeded skewed workload (see workloads.Skewed):

- W1 catch-up ingest of the preloaded topic, cleaner off, against a confluent-kafka consume
  loop over the same topic (the raw limit).
- W2 one cleaning pass over that log, against pyarrow reading and rewriting the same Parquet
  files with as many threads as cores (the raw limit).
- Bytes written: the same topic mirrored again in micro-batches of ``--batch`` records with
  the cleaner on, as a continuously running mirror sees it; bytes written per byte ingested
  against Kafka's cleaner model (every pass recopies the log from its start to the end of the
  dirty range) and against the naive baseline (foreachBatch MERGE of each micro-batch into a
  latest-value table, bench/naive.py).
- W3 erasure latency with max.compaction.lag.ms = ``--max-lag-ms`` (bench/erasure.py).
- W4 a cleaning task's peak memory against the number of keys under a fixed dedupe buffer
  (bench/memory.py).

Prints figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

from erasure import measure_erasure, percentile  # noqa: E402
from memory import build_log, measure  # noqa: E402
from naive import run_naive  # noqa: E402
from workloads import (  # noqa: E402
    BROKERS,
    Skewed,
    bytes_added,
    consume_loop,
    cores,
    create_topic,
    parquet_files,
    parquet_rewrite,
    start_broker,
)

from compactor.cleaner.maintenance import LogMaintenance, PassReport  # noqa: E402
from compactor.cleaner.partition_cleaner import CleanStats  # noqa: E402
from compactor.config import build_config  # noqa: E402
from compactor.demo.workload import produce  # noqa: E402
from streaming.service import Service  # noqa: E402
from streaming.session import build_session  # noqa: E402

TOPIC = "skewed"
SEGMENT_BYTES = [8 << 20]  # --quick divides it with the records
log = logging.getLogger("bench")
Row = tuple[str, str, str, str]  # measure, figure, baseline, ratio


def _config(broker: str, work: Path, name: str, **extra: str) -> Any:
    return build_config({
        "bootstrap.servers": broker, "topics": TOPIC, "segment.bytes": str(SEGMENT_BYTES[0]),
        # The broker keeps the topic a plain log (see main): the mirror is told it is compact.
        f"topic.{TOPIC}.cleanup.policy": "compact",
        "lake.path": str(work / name / "lake"), "checkpoint.path": str(work / name / "ckpt"),
        "spark.master": f"local[{cores()}]", "spark.ui.enabled": "false",
        **{k.replace("_", "."): v for k, v in extra.items()},
    })


def _stats(report: PassReport) -> list[CleanStats]:
    return [o.result.stats for o in report.cleaned if o.result is not None]


def w1_ingest(broker: str, work: Path, wl: Skewed) -> list[Row]:
    loop_s, loop_bytes = consume_loop(broker, TOPIC, wl.partitions, wl.records)
    config = _config(broker, work, "w1", log_cleaner_enable="false")
    t0 = time.perf_counter()
    build_session(config.spark)  # the JVM's start, once per process, timed apart
    jvm_s = time.perf_counter() - t0
    summary = Service(config).run(once=True)
    ingest = summary.ingest
    loop_rate = wl.records / loop_s
    rates = [ingest.records / s for s in
             (summary.seconds + jvm_s, summary.seconds, ingest.busy_seconds,
              ingest.busy_seconds - ingest.table_seconds)]
    log.info("W1: loop %.1fs for %d bytes; mirror %d records in %d batches, Spark start "
             "%.1fs, run %.1fs, in micro-batches %.1fs (%.1fs merging the table)", loop_s,
             loop_bytes, ingest.records, ingest.batches, jvm_s, summary.seconds,
             ingest.busy_seconds, ingest.table_seconds)
    names = ["W1 ingest records/s, whole run with Spark's start",
             "W1 ingest records/s, catch-up (query start to caught up)",
             "W1 ingest records/s, inside micro-batches",
             "W1 ingest records/s, micro-batches without the table MERGE"]
    return [(name, f"{rate:,.0f}", f"{loop_rate:,.0f}", f"{rate / loop_rate:.2f}x")
            for name, rate in zip(names, rates, strict=True)]


def _record_bytes(files: list[Path]) -> int:
    """Key and value bytes of Parquet log files (the unit of segment.bytes)."""
    total = 0
    for f in files:
        t = pq.read_table(f, columns=["key", "value"])
        for c in ("key", "value"):
            total += pc.sum(pc.fill_null(pc.binary_length(t.column(c)), 0)).as_py() or 0
    return total


def w2_cleaning(broker: str, work: Path, repeats: int = 3) -> list[Row]:
    """Record MB/s on both sides: the pass covers the closed segments, the rewrite every file.
    Each side runs ``repeats`` times (the pass on fresh copies of the W1 lake); medians."""
    for i in range(repeats):
        shutil.copytree(work / "w1", work / f"w2-{i}")
    files = parquet_files(work / "w1" / "lake" / TOPIC / "log")
    raw = sorted(parquet_rewrite(files, work / f"w2-rewrite-{i}", cores())
                 for i in range(repeats))
    raw_s, raw_disk = raw[len(raw) // 2]
    raw_rate = _record_bytes(files) / 1e6 / raw_s
    passes = []
    for i in range(repeats):
        config = Service(_config(broker, work, f"w2-{i}")).config
        report = LogMaintenance(build_session(config.spark), config).run_pass()
        passes.append((report.seconds, _stats(report)))
    seconds, stats = sorted(passes, key=lambda p: p[0])[len(passes) // 2]
    covered = sum(s.kafka_model_bytes for s in stats)
    rate = covered / 1e6 / seconds
    log.info("W2: raw rewrite of %d files (%.1f MB on disk) in %s s; passes in %s s over %.1f "
             "MB of records, %d dropped, %.1f MB written", len(files), raw_disk / 1e6,
             [round(r[0], 2) for r in raw], [round(p[0], 2) for p in passes], covered / 1e6,
             sum(s.records_dropped for s in stats), sum(s.bytes_written for s in stats) / 1e6)
    return [("W2 cleaning, record MB/s (median of 3)", f"{rate:.1f}", f"{raw_rate:.1f}",
             f"{rate / raw_rate:.2f}x")]


def continuous(broker: str, work: Path, wl: Skewed, batch: int) -> dict[str, float]:
    """The topic mirrored in micro-batches of ``batch`` records with the cleaner on."""
    config = _config(broker, work, "cont", max_offsets_per_trigger=str(batch),
                     trigger_interval_ms="0")
    service = Service(config)
    passes: list[CleanStats] = []
    ingested = [0]
    settled = threading.Event()

    def on_batch(_id: int, stats: Any) -> None:
        ingested[0] += sum(s.records for s in stats.values())

    def on_pass(report: PassReport) -> None:
        passes.extend(_stats(report))
        if ingested[0] >= wl.records:
            settled.set()  # a pass after the last batch: the mirror is caught up and clean

    summaries: list[Any] = []
    worker = threading.Thread(target=lambda: summaries.append(
        service.run(on_batch=on_batch, on_pass=on_pass)), daemon=True)
    worker.start()
    settled.wait(1800)
    service.request_stop()
    worker.join(300)
    ingest = summaries[0].ingest
    lake = Path(config.lake_path) / TOPIC
    figures = {
        "batches": ingest.batches, "passes": len(passes),
        "ingest_record_bytes": ingest.record_bytes,
        "cleaner_record_bytes": sum(s.record_bytes_written for s in passes),
        "kafka_model_bytes": sum(s.kafka_model_bytes for s in passes),
        "log_disk_bytes": bytes_added(lake / "log"),
        "table_disk_bytes": bytes_added(lake / "table"),
    }
    log.info("continuous: %s", figures)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=50_000,
                    help="records per micro-batch of the continuous run and the baseline")
    ap.add_argument("--tombstones", type=int, default=120, help="W3 tombstones")
    ap.add_argument("--max-lag-ms", type=int, default=10_000, help="W3 max.compaction.lag.ms")
    ap.add_argument("--buffer", type=int, default=16 << 20, help="W4 dedupe buffer bytes")
    ap.add_argument("--memory-keys", default="100000,400000,1600000", help="W4 key counts")
    ap.add_argument("--quick", action="store_true", help="a tenth of the records and keys")
    ap.add_argument("--broker", choices=BROKERS, default="kafka",
                    help="Apache Kafka (a KRaft node) or the demo's embedded Tansu")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    scale = 10 if args.quick else 1
    wl = Skewed(records=args.records // scale, keys=args.keys // scale, zipf=args.zipf)
    batch = args.batch // scale
    SEGMENT_BYTES[0] //= scale
    memory_keys = [int(k) // scale for k in args.memory_keys.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    started = time.monotonic()
    rows: list[Row] = []
    with start_broker(args.broker, work) as broker:
        bootstrap = broker.bootstrap_servers
        # A plain log on the broker: Kafka's own cleaner must not compact the preloaded topic
        # before W1 and the consume loop read all of it.
        create_topic(bootstrap, TOPIC, wl.partitions, cleanup_policy="delete", retention_ms="-1",
                     segment_bytes=str(max(SEGMENT_BYTES[0], 1 << 20)))
        t0 = time.perf_counter()
        produce(bootstrap, TOPIC, list(wl.generate()))
        log.info("produced %s in %.1fs", wl.describe(), time.perf_counter() - t0)

        rows += w1_ingest(bootstrap, work, wl)
        rows += w2_cleaning(bootstrap, work)
        cont = continuous(bootstrap, work, wl, batch)
        spark = build_session({"spark.master": f"local[{cores()}]", "spark.ui.enabled": "false"})
        naive_s, merges = run_naive(spark, bootstrap, TOPIC, work / "naive", batch)
        naive_disk = bytes_added(work / "naive" / "table")
        log.info("naive: %d MERGEs in %.1fs, %.1f MB added", merges, naive_s, naive_disk / 1e6)
        ingested = cont["ingest_record_bytes"]
        cleaner, model = cont["cleaner_record_bytes"], cont["kafka_model_bytes"]
        rows.append(("cleaner rewrite / byte ingested vs Kafka model (record bytes)",
                     f"{cleaner / ingested:.2f}", f"{model / ingested:.2f}",
                     f"{cleaner / model:.2f}x"))
        ours, kafka = ingested + cleaner, ingested + model
        rows.append(("  the same with the ingest write itself",
                     f"{ours / ingested:.2f}", f"{kafka / ingested:.2f}", f"{ours / kafka:.2f}x"))
        rows.append(("bytes written / byte ingested vs naive MERGE (on disk, log)",
                     f"{cont['log_disk_bytes'] / ingested:.2f}", f"{naive_disk / ingested:.2f}",
                     f"{cont['log_disk_bytes'] / naive_disk:.2f}x"))
        both = cont["log_disk_bytes"] + cont["table_disk_bytes"]
        rows.append(("  the same with the latest-value table",
                     f"{both / ingested:.2f}", f"{naive_disk / ingested:.2f}",
                     f"{both / naive_disk:.2f}x"))

        latencies, _tc, _cleaning = measure_erasure(bootstrap, work / "w3", args.tombstones,
                                                    2000, args.max_lag_ms)
    deadline = args.max_lag_ms / 1000
    late = sum(1 for x in latencies if x > deadline)
    rows.append(("W3 erasure latency s p50 / p99 / max",
                 f"{statistics.median(latencies):.1f} / {percentile(latencies, 0.99):.1f} / "
                 f"{latencies[-1]:.1f}", f"deadline {deadline:.0f}", f"{late} late"))
    for keys in memory_keys:
        lake = work / f"w4-{keys}"
        build_log(lake, keys)
        m = measure(lake, args.buffer)
        limit = args.buffer / 2**20 + 300
        task = m["rss_peak_mb"] - m["rss_before_mb"]
        log.info("W4 %d keys: %s", keys, m)
        rows.append((f"W4 {keys:,} keys: task peak MB ({m['passes']:.0f} passes, map "
                     f"{m['max_map_entries']:,.0f}/{m['map_capacity']:,.0f})",
                     f"{task:.0f}", f"buffer+300 = {limit:.0f}", f"{task / limit:.2f}x"))
        for step, mb in m["steps_mb"].items():
            rows.append((f"  {step}: its own peak MB", f"{mb:.0f}", f"{limit:.0f}",
                         f"{mb / limit:.2f}x"))
    print(f"\n{wl.describe()}; micro-batches of {batch:,} records; {cores()} cores; "
          f"{time.monotonic() - started:.0f}s in all; work dir {work}")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    header = ("measure", "this", "baseline", "ratio")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))


if __name__ == "__main__":
    main()
