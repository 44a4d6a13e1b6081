"""Erasure latency: from a tombstone to the physical disappearance of the erased values.

    python bench/erasure.py [--tombstones 120] [--max-lag-ms 10000]

A running mirror (trigger 500 ms, cleaner backoff 1 s) of a compacted topic with
``max.compaction.lag.ms`` = M. Each key's value carries a unique marker; tombstones arrive
spread over time (about five a second). Every 250 ms every file under the lake is searched
(Parquet decoded, everything else raw); a key counts as erased at the first search that finds
its marker nowhere. Prints p50/p99/max latency against M, and the bytes cleaning rewrote.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.broker import EmbeddedBroker
from compactor.config import build_config
from compactor.service import Service
from compactor.workload import Record, partition_for, produce


def marker(key: int) -> bytes:
    return b"MARKER-%08d" % key


def _decoded(path: Path) -> bytes:
    """Every binary and string value of a Parquet file, joined: compression hides nothing."""
    table = pq.read_table(path)
    parts = []
    for column in table.columns:
        if pa.types.is_binary(column.type) or pa.types.is_binary_view(column.type) or \
                pa.types.is_string(column.type) or pa.types.is_large_binary(column.type):
            parts.extend(v for v in column.to_pylist() if v)
    return b"\x00".join(p if isinstance(p, bytes) else str(p).encode() for p in parts)


def markers_on_disk(root: Path, wanted: set[bytes]) -> set[bytes]:
    found: set[bytes] = set()
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            try:
                blob = _decoded(path) if name.endswith(".parquet") else path.read_bytes()
            except Exception:
                continue  # a file being written or deleted right now: next round
            found.update(m for m in wanted if m in blob)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tombstones", type=int, default=120)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--max-lag-ms", type=int, default=10_000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="bench-erasure-"))
    partitions = 2
    with EmbeddedBroker(work / "broker.log") as broker:
        topic = "users"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, partitions, 1, config={
            "cleanup.policy": "compact", "max.compaction.lag.ms": str(args.max_lag_ms)})]
        )[topic].result()
        config = build_config({
            "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
            "lake.path": str(work / "lake"), "trigger.interval.ms": "500",
            "log.cleaner.backoff.ms": "1000", "spark.master": "local[2]",
            "spark.ui.enabled": "false",
        })
        service = Service(config)
        tc = service.config.topic(topic)
        summaries = []
        worker = threading.Thread(target=lambda: summaries.append(service.run()), daemon=True)
        worker.start()
        keys = [b"user-%06d" % k for k in range(args.keys)]
        produce(broker.bootstrap_servers, topic, [
            Record(k, b'{"email":"%s"}' % marker(i), partition_for(k, partitions))
            for i, k in enumerate(keys)])
        lake = work / "lake" / topic
        while not (lake / "table" / "_delta_log").exists():
            time.sleep(0.2)
        doomed = random.Random(3).sample(range(args.keys), args.tombstones)
        sent: dict[bytes, float] = {}
        erased: dict[bytes, float] = {}

        def send() -> None:
            for i in doomed:
                ts = int(time.time() * 1000)
                produce(broker.bootstrap_servers, topic,
                        [Record(keys[i], None, partition_for(keys[i], partitions), ts)])
                sent[marker(i)] = ts / 1000
                time.sleep(0.2)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        give_up = time.time() + args.tombstones * 0.2 + 3 * args.max_lag_ms / 1000 + 60
        while len(erased) < args.tombstones and time.time() < give_up:
            pending = {m for m in sent if m not in erased}
            if pending:
                left = markers_on_disk(lake, pending)
                now = time.time()
                for m in pending - left:
                    erased[m] = now
            time.sleep(0.25)
            print(f"\r{len(sent)} tombstones sent, {len(erased)} erased", end="", flush=True)
        print()
        service.request_stop()
        worker.join(120)
    latencies = sorted(erased[m] - sent[m] for m in erased)
    limit = args.max_lag_ms / 1000
    late = sum(1 for x in latencies if x > limit)
    print(f"{len(latencies)} of {args.tombstones} tombstones erased physically "
          f"(max.compaction.lag.ms = {args.max_lag_ms}, cleaning forced at "
          f"{tc.cleaning_lag_ms} ms, vacuum grace {tc.vacuum_grace_ms} ms)")
    if latencies:
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"latency s: p50 {statistics.median(latencies):.2f}  p99 {p99:.2f}  "
              f"max {latencies[-1]:.2f}  deadline {limit:.2f}  late {late}")
    if summaries:
        cleaning = summaries[0].cleaning
        print(f"cleaning: {cleaning.passes} passes, {cleaning.partitions_cleaned} partition "
              f"cleanings, {cleaning.bytes_rewritten / 1e6:.2f} MB rewritten, "
              f"{cleaning.records_dropped} records dropped, {cleaning.files_vacuumed} files "
              "vacuumed")
    print(f"lake: {work}")


if __name__ == "__main__":
    main()
