"""What a Spark job's round trip to its Python workers costs: over loopback TCP with PySpark's
own worker daemon (Spark's default), over TCP with the session's ``streaming.worker_daemon``
(quick acknowledgements), and over a Unix socket (``spark.python.unix.domain.socket.enabled``).

    python bench/python_workers.py            # 3 sessions of each kind, alternating
    python bench/python_workers.py --rounds 5 --jobs 60

Each session (a process of its own, the product's ``build_session`` with that kind's keys)
runs ``--jobs`` jobs of each shape after a warm-up, one at a time as micro-batches do:

- ``empty``: two tasks that return a number, the fixed cost every micro-batch pays;
- ``results``: two tasks that each return 200 results of 500 bytes, about what a write task
  over hundreds of partitions sends back.

Prints each shape's median job time per kind and each kind's ratio to PySpark's daemon.
Prints figures, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import alternate_sessions  # noqa: E402

DAEMON = "spark.python.daemon.module"
UNIX_SOCKET = "spark.python.unix.domain.socket.enabled"
KINDS = {
    "pyspark daemon": {DAEMON: "pyspark.daemon"},
    "session": {},
    "unix socket": {DAEMON: "pyspark.daemon", UNIX_SOCKET: "true"},
}


def _empty(task: list[int]) -> list[int]:
    return [len(task)]


def _results(task: list[int]) -> list[bytes]:
    return [bytes(500) for _ in range(200)]


_SHAPES = {"empty": _empty, "results": _results}


def session_run(kind: str, jobs: int) -> dict[str, float]:
    """Median seconds of a job of each shape in a new session with ``kind``'s keys."""
    from streaming.session import build_session

    spark = build_session(KINDS[kind])
    context = spark.sparkContext
    out: dict[str, float] = {}
    for shape, task in _SHAPES.items():
        times = []
        for i in range(jobs + 10):  # the first ten warm the workers and the JVM up
            started = time.perf_counter()
            context.parallelize([[1], [2]], 2).flatMap(task).collect()
            if i >= 10:
                times.append(time.perf_counter() - started)
        out[shape] = statistics.median(times)
    spark.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="sessions of each kind")
    ap.add_argument("--jobs", type=int, default=40, help="jobs of each shape per session")
    ap.add_argument("--session", choices=list(KINDS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.session is not None:  # one session, in the process the parent started
        print(json.dumps(session_run(args.session, args.jobs)))
        return
    seen = alternate_sessions(__file__, KINDS, args.rounds, "--jobs", str(args.jobs))
    print(f"{args.rounds} sessions of each kind, {args.jobs} jobs of each shape per session; "
          "median of the sessions' medians")
    print(f"{'job':<10}" + "".join(f"{kind + ' ms':>20}{'ratio':>8}" for kind in KINDS))
    for shape in _SHAPES:
        ms = [statistics.median(r[shape] for r in seen[kind]) * 1000 for kind in KINDS]
        print(f"{shape:<10}" + "".join(f"{m:>20.1f}{m / ms[0]:>7.2f}x" for m in ms))


if __name__ == "__main__":
    main()
