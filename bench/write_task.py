"""What one write task costs per Kafka partition: the same records over few and many partitions.

    python bench/write_task.py                      # 400 records a round over 4 and 200 partitions
    python bench/write_task.py --partitions 4,200,1000 --rounds 20 --profile 200
    python bench/write_task.py --partitions 4,1000,20x50 --profile 20x50

One broker (Apache Kafka by default); per case a topic of that many partitions (``PxT``: T
topics of P partitions), and rounds of ``--records`` records spread evenly over them (with
fewer records than partitions, one each to as many partitions picked at random). Each round
plans the new ranges as a micro-batch does and runs the task side
(``streaming.consumer.write_ranges``: one consumer for the small ranges, one data file per
partition) in this process, without Spark, then commits them
(``compactor.ingest.writer.commit_ranges``). Prints the median write and commit per round, the
write's cost per partition, and each case's ratio to the first; ``--profile CASE`` adds the
functions that took the most time in that case. The first two rounds warm up and are not
counted. Prints figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import BROKERS, create_topic, start_broker  # noqa: E402

from compactor.config import build_config, resolve_config  # noqa: E402
from compactor.demo.workload import Record, produce  # noqa: E402
from compactor.ingest.writer import commit_ranges, plan_ranges  # noqa: E402
from compactor.kafka.consumer_cache import close_kept  # noqa: E402
from streaming.consumer import write_ranges  # noqa: E402

WARM_UP = 2


def one_case(bootstrap: str, work: Path, partitions: int, topics: int, records: int,
             rounds: int, profile: cProfile.Profile | None) -> tuple[float, float]:
    """Median seconds of (write, commit) per round over ``topics`` topics of ``partitions``
    partitions."""
    names = [f"write-{partitions}x{topics}-{t}" for t in range(topics)]
    for topic in names:
        create_topic(bootstrap, topic, partitions)
    config = resolve_config(build_config({
        "bootstrap.servers": bootstrap, "topics": ",".join(names),
        "lake.path": str(work / f"{partitions}x{topics}")}))
    client = config.kafka_client_config()
    every = [(topic, p) for topic in names for p in range(partitions)]
    per = max(1, records // len(every))
    ends = dict.fromkeys(every, 0)
    writes, commits = [], []
    for rnd in range(rounds + WARM_UP):
        # Fewer records than partitions: one each to ``records`` partitions picked at random,
        # as keys hashed over every partition of every topic fall.
        chosen = every if records >= len(every) else sorted(
            random.Random(rnd).sample(every, records))
        for topic in names:
            produce(bootstrap, topic, [Record(b"k%d-%d" % (p, i), b"v" * 100, p)
                                       for t, p in chosen if t == topic for i in range(per)])
        plans = plan_ranges(config, [(t, p, ends[t, p], ends[t, p] + per) for t, p in chosen],
                            int(time.time() * 1000))
        for tp in chosen:
            ends[tp] += per
        counted = rnd >= WARM_UP
        started = time.monotonic()
        if counted and profile is not None:
            profile.enable()
        results = write_ranges(plans, client, 120_000, True)
        written = time.monotonic()
        commit_ranges(config, results)
        if profile is not None:
            profile.disable()
        if counted:
            writes.append(written - started)
            commits.append(time.monotonic() - written)
    return statistics.median(writes), statistics.median(commits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="4,200",
                    help="the cases, comma-separated: P partitions of one topic, or PxT")
    ap.add_argument("--records", type=int, default=400, help="records a round, in all")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--broker", choices=BROKERS, default="kafka")
    ap.add_argument("--profile", default=None, metavar="CASE")
    args = ap.parse_args()
    cases = args.partitions.split(",")
    work = Path(tempfile.mkdtemp(prefix="write-task-"))
    profile = cProfile.Profile() if args.profile in cases else None
    print(f"{args.records} records a round, {args.rounds} rounds; one task in this process")
    print(f"{'partitions':>10} {'write':>8} {'per partition':>14} {'ratio':>6} {'commit':>8}")
    with start_broker(args.broker, work) as broker:
        first = None
        for case in cases:
            partitions, _, topics = case.partition("x")
            write_s, commit_s = one_case(broker.bootstrap_servers, work, int(partitions),
                                         int(topics or 1), args.records, args.rounds,
                                         profile if case == args.profile else None)
            first = first or write_s
            every = int(partitions) * int(topics or 1)
            print(f"{case:>10} {write_s:>7.3f}s {write_s / every * 1000:>11.2f} ms "
                  f"{write_s / first:>5.1f}x {commit_s:>7.3f}s", flush=True)
        close_kept()  # the kept consumer would retry the stopped broker
    if profile is not None:
        print(f"\nmost time, {args.profile} partitions (all counted rounds):")
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
