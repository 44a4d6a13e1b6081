"""Cleaning benchmark: throughput and bytes rewritten per pass, beside Kafka's cleaner model.

    python bench/clean.py [--records 1000000] [--keys 100000] [--update 300000]

Mirrors ``--records`` records over ``--keys`` keys (about 100-byte values, 4 partitions) with
the cleaner off, runs one pass, produces ``--update`` more updates, mirrors them and runs a
second pass. For each pass it prints the log processed (record bytes from the log start to
the end of the dirty range, which Kafka's cleaner recopies every pass), the wall time, the
bytes this cleaner rewrote, and the ratio. Not a test: figures, not assertions.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from compactor.admin import resolve_config
from compactor.broker import EmbeddedBroker
from compactor.config import build_config
from compactor.maintenance import LogMaintenance
from compactor.service import Service
from compactor.workload import Record, partition_for, produce
from streaming.session import build_session

PARTITIONS = 4


def records(n: int, keys: int, seed: int) -> list[Record]:
    rng = random.Random(seed)
    payload = os.urandom(90)
    out = []
    for _ in range(n):
        key = b"key-%07d" % rng.randrange(keys)
        out.append(Record(key, payload, partition_for(key, PARTITIONS)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--update", type=int, default=300_000)
    ap.add_argument("--segment-bytes", type=int, default=4 * 1024 * 1024)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="bench-clean-"))
    with EmbeddedBroker(work / "broker.log") as broker:
        topic = "bench"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={
            "cleanup.policy": "compact", "segment.bytes": str(args.segment_bytes),
            "min.cleanable.dirty.ratio": "0.01"})])[topic].result()
        base = {
            "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
            "lake.path": str(work / "lake"), "spark.master": f"local[{os.cpu_count() or 2}]",
            "spark.ui.enabled": "false",
        }
        mirror_only = build_config({**base, "log.cleaner.enable": "false"})
        config = resolve_config(build_config(base))
        maintenance = LogMaintenance(build_session(config.spark), config)
        print(f"{'pass':<6} {'log MB':>8} {'seconds':>8} {'MB/s':>7} {'rewritten MB':>13} "
              f"{'Kafka MB':>9} {'ratio':>6} {'dropped':>9}")
        for name, n, seed in (("1", args.records, 1), ("2", args.update, 2)):
            produce(broker.bootstrap_servers, topic, records(n, args.keys, seed))
            Service(mirror_only).run(once=True)
            started = time.monotonic()
            report = maintenance.run_pass()
            took = time.monotonic() - started
            stats = [o.result.stats for o in report.cleaned if o.result is not None]
            model = sum(s.kafka_model_bytes for s in stats)
            written = sum(s.record_bytes_written for s in stats)
            dropped = sum(s.records_dropped for s in stats)
            if not stats:
                print(f"{name:<6} nothing was due (the new records are in active segments)")
                continue
            print(f"{name:<6} {model / 1e6:8.1f} {took:8.2f} {model / 1e6 / took:7.1f} "
                  f"{written / 1e6:13.2f} {model / 1e6:9.1f} {written / model:6.2f} "
                  f"{dropped:9,}")
    print(f"\n{args.records:,} + {args.update:,} records over {args.keys:,} keys, "
          f"{PARTITIONS} partitions, segment.bytes={args.segment_bytes}, {os.cpu_count()} cores. "
          "log MB = record bytes from log start to the end of the dirty range (what Kafka's "
          "cleaner recopies); seconds = the pass's wall time including commit and vacuum.")


if __name__ == "__main__":
    main()
