"""What asking for topic ids costs the micro-batch that asks: in its process, or in a child.

    python bench/topic_ids.py                       # 50 topics of 20 partitions
    python bench/topic_ids.py --topics 5 --partitions 200 --rounds 40

Every micro-batch asks the broker for its topics' ids once its tasks have read, and stages its
commits while the answer comes. One broker (Apache Kafka by default) with ``--topics`` topics
of ``--partitions`` partitions; per round the ids of every topic are asked, then a fixed piece
of pure-Python work (the stand-in for staging the commits, about ``--work-ms`` alone) runs at
once, then the answer is awaited. Per way of asking it prints the median seconds of the work
beside the request and of the whole round, and each one's ratio to asking nothing (the
baseline, measured in the same run, alternated round by round). The ways: confluent-kafka's
``describe_topics`` in this process (the mirror before), and ``compactor.kafka.topic_ids``'s
child process. Prints figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import BROKERS, create_topic, start_broker  # noqa: E402

from compactor.kafka.topic_ids import TopicIds  # noqa: E402


def _work(n: int) -> None:
    total = 0
    for i in range(n):
        total += i * i % 7


def _calibrate(work_ms: float) -> int:
    """Iterations of :func:`_work` that take about ``work_ms`` alone."""
    n = 10_000
    started = time.perf_counter()
    _work(n)
    return max(1, int(n * work_ms / 1000 / (time.perf_counter() - started)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--work-ms", type=float, default=25.0)
    ap.add_argument("--broker", choices=BROKERS, default="kafka")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="topic-ids-"))
    with start_broker(args.broker, work) as broker:
        servers = broker.bootstrap_servers
        names = [f"ids-{args.partitions}x{args.topics}-{i}" for i in range(args.topics)]
        for name in names:
            create_topic(servers, name, args.partitions)
        admin = AdminClient({"bootstrap.servers": servers})
        child = TopicIds({"bootstrap.servers": servers}, 30.0)

        def in_process() -> Callable[[], object]:
            futures = admin.describe_topics(TopicCollection(names))
            return lambda: [f.result().topic_id for f in futures.values()]

        ways: dict[str, Callable[[], Callable[[], object]]] = {
            "nothing asked": lambda: lambda: None,
            "in process": in_process,
            "child process": lambda: child.ask(names),
        }
        n = _calibrate(args.work_ms)
        beside: dict[str, list[float]] = {w: [] for w in ways}
        rounds: dict[str, list[float]] = {w: [] for w in ways}
        for rnd in range(args.rounds + 2):
            for way, ask in ways.items():
                started = time.perf_counter()
                answer = ask()
                _work(n)
                worked = time.perf_counter()
                answer()
                if rnd >= 2:  # the first two warm up
                    beside[way].append(worked - started)
                    rounds[way].append(time.perf_counter() - started)
        child.close()
    base_work = statistics.median(beside["nothing asked"])
    base_round = statistics.median(rounds["nothing asked"])
    print(f"{args.topics} topics x {args.partitions} partitions, {args.rounds} rounds, "
          f"work {args.work_ms:.0f} ms alone; broker {args.broker}")
    print(f"{'asked':<16}{'work s':>9}{'ratio':>8}{'round s':>10}{'ratio':>8}")
    for way in ways:
        w, r = statistics.median(beside[way]), statistics.median(rounds[way])
        print(f"{way:<16}{w:>9.4f}{w / base_work:>7.2f}x{r:>10.4f}{r / base_round:>7.2f}x")


if __name__ == "__main__":
    main()
