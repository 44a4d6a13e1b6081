"""A Kafka client that fills Arrow buffers natively, beside the confluent-kafka loop (issue 16).

    pip install kafkarrow && python bench/arrow_client.py [--records 2000000]

kafkarrow (Rust, librdkafka through rust-rdkafka) returns Arrow record batches of key, value,
topic, partition, offset and timestamp. Both sides read the same topic on the embedded broker
from its earliest offset; the figure is records/s and the ratio to confluent-kafka's loop
(bench/run.py's raw limit) measured in the same run. It is not the mirror's client: it cannot
start at a given offset (only earliest, latest or a time), and it drops headers and the
timestamp type, which the log keeps (see the README's Benchmarks).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import Skewed, consume_loop, create_topic  # noqa: E402

from compactor.demo.broker import EmbeddedBroker  # noqa: E402
from compactor.demo.workload import produce  # noqa: E402

TOPIC = "skewed"


def arrow_loop(bootstrap: str, topic: str, expected: int, batch_size: int | None) -> float:
    """Seconds for kafkarrow to deliver ``expected`` records, touching each batch's columns."""
    from kafkarrow import ConsumerManager, SourceTopic

    manager = ConsumerManager(
        config={"bootstrap.servers": bootstrap, "group.id": "bench-arrow",
                "fetch.wait.max.ms": "100", "fetch.queue.backoff.ms": "10"},
        topics=[SourceTopic.from_earliest(topic)], batch_size=batch_size)
    seen = nbytes = 0
    start = time.perf_counter()
    while seen < expected:
        batch = manager.poll(timeout_ms=1000)
        seen += batch.num_rows
        nbytes += batch.column("key").nbytes + batch.column("value").nbytes
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="kafkarrow's rows per batch (its default when not given)")
    args = ap.parse_args()
    wl = Skewed(records=args.records, keys=args.records // 10, zipf=1.0)
    work = Path(tempfile.mkdtemp(prefix="bench-arrow-"))
    with EmbeddedBroker(work / "broker.log") as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, TOPIC, wl.partitions)
        produce(bootstrap, TOPIC, list(wl.generate()))
        for _ in range(args.repeats):  # alternating, so both see the same machine
            loop_s, _bytes = consume_loop(bootstrap, TOPIC, wl.partitions, wl.records)
            arrow_s = arrow_loop(bootstrap, TOPIC, wl.records, args.batch_size)
            print(f"confluent-kafka loop {wl.records / loop_s:12,.0f} rec/s   kafkarrow "
                  f"{wl.records / arrow_s:12,.0f} rec/s   ratio {loop_s / arrow_s:.2f}x",
                  flush=True)


if __name__ == "__main__":
    main()
