"""Ingest benchmark: the mirror against a plain confluent-kafka consume loop, same topic, same run.

    python bench/ingest.py [--records 1000000] [--partitions 4] [--value-bytes 90]

Prints records/s and MB/s of each and their ratio. Not a test: figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.broker import EmbeddedBroker
from compactor.config import build_config
from compactor.service import Service
from compactor.workload import Record, produce


def consume_loop(bootstrap: str, topic: str, partitions: int, expected: int) -> tuple[float, int]:
    """The raw limit: one consumer, all partitions, consume() in batches, touch key and value."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = nbytes = 0
    start = time.perf_counter()
    while seen < expected:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                seen += 1
                nbytes += len(m.key() or b"") + len(m.value() or b"")
    took = time.perf_counter() - start
    consumer.close()
    return took, nbytes


def main() -> None:
    import logging
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=90)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    with EmbeddedBroker(work / "broker.log") as broker:
        topic = "bench"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics(
            [NewTopic(topic, args.partitions, 1, config={"cleanup.policy": "compact"})]
        )[topic].result()
        payload = os.urandom(args.value_bytes)
        records = [Record(b"key-%07d" % (i % 100_000), payload, i % args.partitions)
                   for i in range(args.records)]
        t0 = time.perf_counter()
        produce(broker.bootstrap_servers, topic, records)
        print(f"produced {args.records:,} records in {time.perf_counter() - t0:.1f}s")
        del records

        loop_s, loop_bytes = consume_loop(broker.bootstrap_servers, topic, args.partitions,
                                          args.records)
        config = build_config({
            "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
            "lake.path": str(work / "lake"), "spark.master": f"local[{os.cpu_count() or 2}]",
            "spark.ui.enabled": "false", "log.cleaner.enable": "false",  # ingest only
        })
        summary = Service(config).run(once=True)
        ingest = summary.ingest
    mb = loop_bytes / 1e6
    rows = [
        ("confluent-kafka consume loop", loop_s, args.records / loop_s, mb / loop_s),
        ("mirror, inside micro-batches", ingest.busy_seconds,
         ingest.records / ingest.busy_seconds, ingest.record_bytes / 1e6 / ingest.busy_seconds),
        ("mirror, whole run incl. Spark start", summary.seconds,
         ingest.records / summary.seconds, ingest.record_bytes / 1e6 / summary.seconds),
    ]
    print(f"\n{args.records:,} records, {args.value_bytes}-byte values, {args.partitions} "
          f"partitions, {os.cpu_count()} cores; lake in {work}")
    print(f"{'':38} {'seconds':>8} {'records/s':>11} {'MB/s':>7} {'vs loop':>8}")
    base = rows[0][2]
    for name, secs, rate, mbs in rows:
        print(f"{name:38} {secs:8.2f} {rate:11,.0f} {mbs:7.1f} {rate / base:7.2f}x")
    print(f"mirrored {ingest.records:,} records in {ingest.batches} micro-batches")


if __name__ == "__main__":
    main()
