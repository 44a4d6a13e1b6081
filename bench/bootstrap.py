"""Bootstrap benchmark: the latest value of every key from the lake, against the broker.

    python bench/bootstrap.py [--keys 1000000] [--versions 1] [--partitions 4]

Both readers build the same key -> value dict: one from ``compactor.open_log`` (Arrow batches
from the compacted log in the lake), one with a confluent-kafka consumer reading the topic from
offset 0. ``--versions N`` writes every key N times; the lake then holds the compacted log
(one record per key) while the embedded broker, which does not compact, serves all N. Prints
seconds, keys/s and the ratio. Not a test: figures, not assertions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compactor import open_log
from compactor.config import build_config
from compactor.demo.broker import EmbeddedBroker
from compactor.demo.workload import Record, partition_for, produce
from streaming.service import Service


def from_broker(bootstrap: str, topic: str, ends: dict[int, int]) -> tuple[float, int]:
    # fetch.queue.backoff.ms: librdkafka's default (1 s) idles a fast consumer; see
    # streaming/consumer.py. The broker side gets the same setting as the mirror.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bootstrap",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    state: dict[bytes, bytes] = {}
    remaining = sum(ends.values())
    start = time.perf_counter()
    while remaining:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                remaining -= 1
                state[m.key()] = m.value()
    took = time.perf_counter() - start
    consumer.close()
    return took, len(state)


def from_lake(lake: str, topic: str) -> tuple[float, int, dict[int, int]]:
    start = time.perf_counter()
    snap = open_log(lake, topic)
    state: dict[bytes, bytes | None] = {}
    for batch in snap.batches():
        state.update(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                         strict=True))
    return time.perf_counter() - start, len(state), snap.next_offsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--versions", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--value-bytes", type=int, default=100)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-bootstrap-"))
    with EmbeddedBroker(work / "broker.log") as broker:
        topic = "profiles"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, args.partitions, 1, config={
            "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
            "segment.bytes": str(16 * 1024 * 1024)})])[topic].result()
        payload = os.urandom(args.value_bytes // 2).hex().encode()
        records = []
        for version in range(args.versions):
            for k in range(args.keys):
                key = b"user-%08d" % k
                records.append(Record(key, payload[:-8] + b"%08d" % version,
                                      partition_for(key, args.partitions)))
        t0 = time.perf_counter()
        produce(broker.bootstrap_servers, topic, records)
        print(f"produced {len(records):,} records ({args.keys:,} keys x {args.versions}) in "
              f"{time.perf_counter() - t0:.1f}s")
        del records
        config = build_config({
            "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
            "lake.path": str(work / "lake"), "spark.master": f"local[{os.cpu_count() or 2}]",
            "spark.ui.enabled": "false",
        })
        t0 = time.perf_counter()
        summary = Service(config).run(once=True)
        print(f"mirrored and cleaned in {time.perf_counter() - t0:.1f}s "
              f"({summary.cleaning.records_dropped:,} superseded records dropped)")
        lake_s, lake_keys, ends = from_lake(str(work / "lake"), topic)
        broker_s, broker_keys = from_broker(broker.bootstrap_servers, topic, ends)
    assert lake_keys == broker_keys == args.keys, (lake_keys, broker_keys)
    print(f"\n{'bootstrap of ' + format(args.keys, ',') + ' keys':<40} {'seconds':>8} "
          f"{'keys/s':>11} {'records read':>13}")
    print(f"{'from the broker (consumer from 0)':<40} {broker_s:>8.2f} "
          f"{args.keys / broker_s:>11,.0f} {sum(ends.values()):>13,}")
    print(f"{'from the lake (compactor.open_log)':<40} {lake_s:>8.2f} "
          f"{args.keys / lake_s:>11,.0f} {lake_keys:>13,}")
    print(f"lake / broker speed: {broker_s / lake_s:.2f}x")


if __name__ == "__main__":
    main()
