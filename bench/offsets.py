"""What asking Kafka for many partitions' offsets costs, the product's way and the AdminClient's.

    python bench/offsets.py                        # 330 and 1,000 partitions, 20 rounds each
    python bench/offsets.py --partitions 200,1000 --rounds 40
    python bench/offsets.py --partitions 1000 --topics 50   # the partitions over 50 topics

A micro-batch asks the broker's log start of every partition it reads (the plan), the source
asks every partition's end at every trigger, and progress and metrics ask them every few
seconds. One broker (Apache Kafka by default), ``--topics`` topics sharing the most
partitions asked (one by default), a record in each; per case the median wall and CPU time
(this process, librdkafka's threads included) of:

- ``offsets_for_times``: the product's ``OffsetReader.offsets`` (a consumer's
  ``offsets_for_times`` with Kafka's special timestamps -2 and -1: one answer list);
- ``admin_list_offsets``: the AdminClient's ``list_offsets`` with ``OffsetSpec`` (the product's
  way before: a Python future per partition).

Both ask the log starts (``earliest``) and the ends (``latest``), and their answers are
checked to be equal. Prints figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

sys.path.insert(0, str(Path(__file__).parent))

from workloads import BROKERS, create_topic, start_broker  # noqa: E402

from compactor.kafka.broker_offsets import OffsetReader  # noqa: E402
from compactor.kafka.clients import with_logger  # noqa: E402

Ask = Callable[[list[tuple[str, int]], str], dict[tuple[str, int], int]]


def admin_way(bootstrap: str) -> Ask:
    """The AdminClient's ListOffsets, as the product asked before."""
    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))

    def ask(tps: list[tuple[str, int]], which: str) -> dict[tuple[str, int], int]:
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                     request_timeout=30)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    return ask


def timed(ask: Ask, tps: list[tuple[str, int]], which: str, rounds: int,
          ) -> tuple[float, float, dict[tuple[str, int], int]]:
    """Median wall and CPU milliseconds of ``rounds`` asks (after one warm-up), the answer."""
    answer = ask(tps, which)
    walls, cpus = [], []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        ask(tps, which)
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus), answer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="330,1000", help="comma-separated cases")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--topics", type=int, default=1, help="topics the partitions are spread over")
    ap.add_argument("--broker", choices=BROKERS, default="kafka")
    args = ap.parse_args()
    cases = [int(n) for n in args.partitions.split(",")]
    work = Path(tempfile.mkdtemp(prefix="offsets-"))
    with start_broker(args.broker, work) as broker:
        bootstrap = broker.bootstrap_servers
        per = -(-max(cases) // args.topics)  # partitions of each topic
        topics = [f"offsets-{i}" for i in range(args.topics)]
        for topic in topics:
            create_topic(bootstrap, topic, per)
        every = [(t, p) for t in topics for p in range(per)]
        producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 20}))
        for t, p in every:
            producer.produce(t, key=b"k", value=b"v", partition=p)
        producer.flush(60)
        ways = {"offsets_for_times": OffsetReader({"bootstrap.servers": bootstrap}).offsets,
                "admin_list_offsets": admin_way(bootstrap)}
        print(f"{args.rounds} rounds a case, {args.topics} topic(s); wall and CPU (this "
              "process) milliseconds, median")
        print(f"{'partitions':>10} {'which':>9} {'way':>19} {'wall':>7} {'cpu':>7} "
              f"{'cpu ratio':>9}")
        for n in cases:
            tps = [(t, p) for t in topics for p in range(-(-n // args.topics))][:n]
            for which in ("earliest", "latest"):
                results = {name: timed(ask, tps, which, args.rounds) for name, ask in ways.items()}
                answers = {name: r[2] for name, r in results.items()}
                if answers["offsets_for_times"] != answers["admin_list_offsets"]:
                    raise SystemExit(f"the two ways answered differently for {which} offsets")
                base = results["offsets_for_times"][1]
                for name, (wall, cpu, _) in results.items():
                    print(f"{n:>10} {which:>9} {name:>19} {wall:>7.1f} {cpu:>7.1f} "
                          f"{cpu / base:>8.2f}x")


if __name__ == "__main__":
    main()
