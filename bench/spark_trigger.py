"""What Spark's own steps add to each trigger of a mirror: its offset log (``walCommit``) and
commit log (``commitOffsets``), written with Hadoop's FileContext (Spark's default checkpoint
manager) and with FileSystem (``spark.sql.streaming.checkpointFileManagerClass``, the
session's).

    python bench/spark_trigger.py              # 2 sessions of each kind, alternating, 60 s each
    python bench/spark_trigger.py --rounds 3 --seconds 90

Each session (a process of its own) starts an Apache Kafka broker, a 4-partition topic with
the soak's producer (a process of its own) sending 200 records a second, and ``compactor
run``'s engine with a 2 s trigger and that kind's checkpoint manager. From Spark's progress
of the triggers after the first five it prints the median of each step, and the mirror's own
micro-batch, per kind, with the session's ratio to FileContext's. Prints figures, never
asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import alternate_sessions, create_topic, start_broker  # noqa: E402

MANAGERS = "org.apache.spark.sql.execution.streaming.checkpointing."
KINDS = {
    "FileContext": {"spark.sql.streaming.checkpointFileManagerClass":
                    MANAGERS + "FileContextBasedCheckpointFileManager"},
    "session": {},
}
STEPS = ("triggerExecution", "latestOffset", "queryPlanning", "walCommit", "addBatch",
         "commitOffsets")


def session_run(kind: str, seconds: float) -> dict[str, float]:
    """Median milliseconds of Spark's steps, and of the mirror's batch, in one session."""
    import logging

    from pyspark.sql import SparkSession
    from scale import BatchTimes
    from soak_producer import PARTITIONS, Producer, mirror_config

    from streaming.service import Service

    logging.basicConfig(level=logging.WARNING)
    logger = logging.getLogger("streaming.query")
    logger.setLevel(logging.INFO)
    times = BatchTimes()
    logger.addHandler(times)
    work = Path(tempfile.mkdtemp(prefix="spark-trigger-"))
    with start_broker("kafka", work) as broker:
        servers = broker.bootstrap_servers
        create_topic(servers, "t", PARTITIONS)
        producer = Producer(servers, ["t"], rate=200, keys=1000)
        producer.start()
        service = Service(mirror_config(servers, work, ["t"], **{
            "trigger.interval.ms": "2000", **KINDS[kind]}))
        runner = threading.Thread(target=service.run, daemon=True)
        runner.start()
        time.sleep(seconds)
        session: Any = SparkSession._instantiatedSession
        progress = session.streams.active[0].recentProgress
        producer.stop.set()
        producer.join(60)
        service.request_stop()
        runner.join(120)
    batches = {i: took * 1000 for i, took in zip(times.ids, times.times, strict=True)}
    rows = [p for p in progress if p["batchId"] > 5 and p["batchId"] in batches]
    out = {step: statistics.median(p["durationMs"].get(step, 0) for p in rows) for step in STEPS}
    out["mirror batch"] = statistics.median(batches[p["batchId"]] for p in rows)
    out["triggers"] = len(rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="sessions of each kind")
    ap.add_argument("--seconds", type=float, default=60.0, help="measured per session")
    ap.add_argument("--session", choices=list(KINDS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.session is not None:  # one session, in the process the parent started
        print(json.dumps(session_run(args.session, args.seconds)))
        return
    seen = alternate_sessions(__file__, KINDS, args.rounds, "--seconds", str(args.seconds))
    triggers = {kind: sum(int(r["triggers"]) for r in seen[kind]) for kind in KINDS}
    print(f"{args.rounds} sessions of each kind, {args.seconds:.0f} s each; triggers measured "
          f"{triggers}; median of the sessions' medians, ms")
    print(f"{'step':<18}" + "".join(f"{kind:>14}" for kind in KINDS) + f"{'ratio':>8}")
    for step in (*STEPS, "mirror batch"):
        ms = [statistics.median(r[step] for r in seen[kind]) for kind in KINDS]
        ratio = f"{ms[1] / ms[0]:>7.2f}x" if ms[0] else f"{'-':>8}"
        print(f"{step:<18}" + "".join(f"{m:>14.1f}" for m in ms) + ratio)


if __name__ == "__main__":
    main()
