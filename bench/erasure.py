"""Erasure latency: from a tombstone to the physical disappearance of the erased values.

    python bench/erasure.py [--tombstones 120] [--max-lag-ms 10000]

W3 of ``bench/run.py``, also runnable alone.

A running ``compactor run`` process (trigger 500 ms, cleaner backoff 1 s) of a compacted topic with
``max.compaction.lag.ms`` = M. Each key's value carries a unique marker; tombstones arrive
spread over time (about five a second). Every 250 ms every file under the lake is searched
(Parquet decoded, everything else raw); a key counts as erased at the first search that finds
its marker nowhere. Prints p50/p99/max latency against M, and the bytes cleaning rewrote.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from workloads import create_topic

from compactor.config import build_config
from compactor.demo.broker import EmbeddedBroker
from compactor.demo.workload import Record, partition_for, produce
from streaming.service import Service


def marker(key: int) -> bytes:
    return b"MARKER-%08d" % key


def _decoded(path: Path) -> bytes:
    """Every binary and string value of a Parquet file, joined: compression hides nothing."""
    table = pq.read_table(path)
    parts: list[bytes | str] = []
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


def measure_erasure(bootstrap: str, work: Path, tombstones: int, keys: int,
                    max_lag_ms: int, partitions: int = 2) -> tuple[list[float], Any, Any]:
    """Run ``compactor run``, send the tombstones, watch the disk; (latencies s, topic
    config, the run's cleaning totals)."""
    topic = "users"
    work.mkdir(parents=True, exist_ok=True)
    create_topic(bootstrap, topic, partitions, max_compaction_lag_ms=str(max_lag_ms))
    # The mirror runs as users run it, in its own process: the disk scans below must not
    # take the driver's interpreter lock from it.
    settings = {
        "bootstrap.servers": bootstrap, "topics": topic,
        "lake.path": str(work / "lake"), "checkpoint.path": str(work / "checkpoint"),
        "trigger.interval.ms": "500", "log.cleaner.backoff.ms": "1000",
        "spark.master": "local[2]", "spark.ui.enabled": "false",
    }
    tc = Service(build_config(settings)).config.topic(topic)
    properties = work / "compactor.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    compactor = Path(sys.executable).with_name("compactor")
    mirror = subprocess.Popen([str(compactor), "run", "--config", str(properties), "--json"],
                              stdout=subprocess.PIPE, text=True,
                              stderr=(work / "compactor.log").open("w"))
    names = [b"user-%06d" % k for k in range(keys)]
    produce(bootstrap, topic, [
        Record(k, b'{"email":"%s"}' % marker(i), partition_for(k, partitions))
        for i, k in enumerate(names)])
    lake = work / "lake" / topic
    while not (lake / "table" / "_delta_log").exists():
        if mirror.poll() is not None:
            raise SystemExit(f"compactor run exited {mirror.returncode}: see {work}/compactor.log")
        time.sleep(0.2)
    doomed = random.Random(3).sample(range(keys), tombstones)
    sent: dict[bytes, float] = {}
    erased: dict[bytes, float] = {}

    def send() -> None:
        for i in doomed:
            ts = int(time.time() * 1000)
            produce(bootstrap, topic, [Record(names[i], None, partition_for(names[i], partitions),
                                              ts)])
            sent[marker(i)] = ts / 1000
            time.sleep(0.2)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    give_up = time.time() + tombstones * 0.2 + 3 * max_lag_ms / 1000 + 60
    while len(erased) < tombstones and time.time() < give_up and mirror.poll() is None:
        pending = {m for m in sent if m not in erased}
        if pending:
            left = markers_on_disk(lake, pending)
            now = time.time()
            for m in pending - left:
                erased[m] = now
        time.sleep(0.25)
        print(f"\r{len(sent)} tombstones sent, {len(erased)} erased", end="", flush=True,
              file=sys.stderr)
    print(file=sys.stderr)
    mirror.send_signal(signal.SIGTERM)
    out, _ = mirror.communicate(timeout=120)
    latencies = sorted(erased[m] - sent[m] for m in erased)
    latencies += [math.inf] * (tombstones - len(latencies))  # never erased: infinitely late
    summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return latencies, tc, summary.get("cleaning")


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] if values else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tombstones", type=int, default=120)
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--max-lag-ms", type=int, default=10_000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="bench-erasure-"))
    with EmbeddedBroker(work / "broker.log") as broker:
        latencies, tc, cleaning = measure_erasure(broker.bootstrap_servers, work,
                                                  args.tombstones, args.keys, args.max_lag_ms)
    limit = args.max_lag_ms / 1000
    late = sum(1 for x in latencies if x > limit)
    print(f"{sum(1 for x in latencies if x < math.inf)} of {args.tombstones} tombstones erased "
          f"physically (max.compaction.lag.ms = {args.max_lag_ms}, cleaning forced at "
          f"{tc.cleaning_lag_ms} ms, vacuum grace {tc.vacuum_grace_ms} ms)")
    print(f"latency s: p50 {statistics.median(latencies):.2f}  p99 "
          f"{percentile(latencies, 0.99):.2f}  max {latencies[-1]:.2f}  deadline {limit:.2f}  "
          f"late {late}")
    if cleaning is not None:
        print(f"cleaning: {cleaning['passes']} passes, {cleaning['partitions_cleaned']} "
              f"partition cleanings, {cleaning['bytes_rewritten'] / 1e6:.2f} MB rewritten, "
              f"{cleaning['records_dropped']} records dropped, {cleaning['files_vacuumed']} "
              "files vacuumed")
    print(f"lake: {work}")


if __name__ == "__main__":
    main()
