"""Side by side: the mirror against the pipeline users would build instead.

One topic on Apache Kafka is preloaded with updates and tombstones. Then:

- **ours**: ``compactor run --once`` mirrors it into ``L/T/log`` and ``L/T/table`` (delta-rs,
  our Kafka source), then ``compactor run`` keeps going until no file under the lake holds a
  value of an erased key;
- **theirs**: Spark's own Kafka source (``spark-sql-kafka-0-10``) into a Delta append table,
  and a ``foreachBatch`` MERGE of each micro-batch's last record per key into a latest-value
  table, both with delta-spark (``bench/spark_pipeline_job.py``, in the tests' delta-spark
  environment), both queries ``availableNow``.

Reported: records/s from process start to caught up (log plus latest table), bytes on disk
written, and how long a value of an erased key survives on disk. Run:
``python bench/spark_pipeline.py [--records N]``; the figures go to ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workloads import create_topic, start_broker  # noqa: E402

from compactor.demo.workload import Record, partition_for, produce  # noqa: E402
from tests.lakehouse.delta_spark import job_result, start_job  # noqa: E402
from tests.lakehouse.delta_spark import python as delta_python  # noqa: E402


def _records(n: int, keys: int, value_bytes: int, tombstones: float,
             partitions: int) -> tuple[list[Record], set[bytes]]:
    """The workload, and the values a tombstone erased (every value of a key whose last
    record is a tombstone)."""
    rng = random.Random(7)
    now = int(time.time() * 1000)
    out, by_key = [], {}
    for i in range(n):
        key = b"user-%06d" % rng.randrange(keys)
        value = None if rng.random() < tombstones else \
            (b"val-%d-" % i).ljust(value_bytes, b"x")
        out.append(Record(key, value, partition_for(key, partitions), now))
        by_key.setdefault(key, []).append(value)
    erased = {v for vs in by_key.values() if vs[-1] is None for v in vs if v is not None}
    return out, erased


def _bytes(*dirs: Path) -> int:
    return sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file())


def _surviving(root: Path, erased: pa.Array) -> int:
    """Values of erased keys in any Parquet file under ``root``, live or not."""
    found = 0
    for f in root.rglob("*.parquet"):
        if "_delta_log" in f.parts:
            continue
        try:
            values = pq.read_table(f, columns=["value"]).column("value")
        except Exception:  # noqa: BLE001 - a file vacuum deleted while it was read
            continue
        found += pc.sum(pc.is_in(values.cast(pa.binary()), value_set=erased)).as_py() or 0
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--tombstones", type=float, default=0.05)
    parser.add_argument("--batches", type=int, default=10,
                        help="micro-batches each side takes (maxOffsetsPerTrigger)")
    parser.add_argument("--lag-ms", type=int, default=60_000,
                        help="max.compaction.lag.ms of the topic: the mirror's deadline")
    args = parser.parse_args()
    per_trigger = -(-args.records // args.batches)
    work = Path(tempfile.mkdtemp(prefix="spark-pipeline-"))
    records, erased_values = _records(args.records, args.keys, args.value_bytes,
                                      args.tombstones, args.partitions)
    erased = pa.array(sorted(erased_values), pa.binary())
    delta_python()  # the delta-spark environment, made before any clock starts
    with start_broker("kafka", work) as broker:
        topic = "profiles"
        create_topic(broker.bootstrap_servers, topic, args.partitions,
                     max_compaction_lag_ms=str(args.lag_ms))
        produce(broker.bootstrap_servers, topic, records)
        produced_at = time.monotonic()

        conf = work / "mirror.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in {
            "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
            "lake.path": str(work / "lake"), "checkpoint.path": str(work / "ckpt"),
            "spark.master": "local[2]", "spark.ui.enabled": "false",
            "log.cleaner.backoff.ms": "1000", "trigger.interval.ms": "1000",
            "max.offsets.per.trigger": str(per_trigger)}.items()))
        mirror = [sys.executable, "-m", "compactor.cli", "run", "--config", str(conf)]
        started = time.monotonic()
        done = subprocess.run([*mirror, "--once"], capture_output=True, text=True)
        ours_s = time.monotonic() - started
        assert done.returncode == 0, done.stderr[-3000:]
        lake = work / "lake" / topic
        ours_bytes = _bytes(lake / "log", lake / "table")
        # The deadline binds a running mirror: timed from this start, the lag of a topic
        # whose tombstones are older than that is the deadline still ahead of them.
        running = subprocess.Popen(mirror, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        restarted = time.monotonic()
        try:
            while (left := _surviving(lake, erased)) and \
                    time.monotonic() - restarted < 3 * args.lag_ms / 1000:
                time.sleep(2)
            ours_gone = time.monotonic() - restarted if not left else None
        finally:
            running.terminate()
            running.wait(120)

        job = start_job({"bootstrap": broker.bootstrap_servers, "topic": topic,
                         "spark_version": "4.2.0",
                         "per_trigger": per_trigger,
                         "raw": str(work / "raw"), "latest": str(work / "latest"),
                         "checkpoints": str(work / "spark-ckpt")},
                        script=Path(__file__).with_name("spark_pipeline_job.py"))
        started = time.monotonic()
        theirs = job_result(job, timeout=3600)
        theirs_s = time.monotonic() - started
        theirs_bytes = _bytes(work / "raw", work / "latest")
        left_raw = _surviving(work / "raw", erased)
        left_latest = _surviving(work / "latest", erased)

    total = len(records)
    result = {
        "records": total, "partitions": args.partitions, "erased values": len(erased),
        "records per micro-batch": per_trigger, "since produced s":
        round(time.monotonic() - produced_at),
        "ours": {"seconds": round(ours_s, 1), "records/s": round(total / ours_s),
                 "bytes": ours_bytes, "erased values gone after s of a running mirror":
                 None if ours_gone is None else round(ours_gone, 1),
                 "deadline s": args.lag_ms / 1000},
        "theirs": {"seconds": round(theirs_s, 1), "records/s": round(total / theirs_s),
                   "bytes": theirs_bytes, "merges": theirs["merges"],
                   "erased values left (append table)": left_raw,
                   "erased values left (latest table files)": left_latest},
        "throughput ratio": round(theirs_s / ours_s, 2),
        "bytes ratio": round(ours_bytes / theirs_bytes, 2),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
