"""How long ``compactor run --once`` takes to start, mirror one record and stop.

    python bench/startup.py              # 5 runs of each kind, alternating
    python bench/startup.py --runs 9

One broker (Apache Kafka by default) and a one-partition topic of one record; each run mirrors
it into a fresh lake, as a restarted or scheduled run does. Runs of the product alternate with
runs of a baseline: the product with Spark's search for other Python data sources turned back
on (``streaming.session.NO_SOURCE_LOOKUP`` set to this interpreter, a command that exists).
Prints each kind's median wall time, its seconds to the first ingest commit, the machine's
CPU seconds meanwhile, and the ratios.
Prints figures, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads import BROKERS, create_topic, start_broker  # noqa: E402

from compactor.demo.workload import Record, produce  # noqa: E402

# The product's console script, with the search turned on for the baseline.
_BASELINE = ("import sys, streaming.session as s; s.NO_SOURCE_LOOKUP = sys.executable; "
             "from compactor.cli import entry; sys.argv[0] = 'compactor'; entry()")
_PRODUCT = "import sys; from compactor.cli import entry; sys.argv[0] = 'compactor'; entry()"


def _busy_s() -> float:
    """CPU seconds the machine has spent busy since boot (all processes)."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def one_run(code: str, config: Path) -> tuple[float, float | None, float]:
    """Wall seconds of one ``run --once``, seconds to its first ingest commit, and the CPU
    seconds the machine spent meanwhile (the run's processes, the broker's, and the rest)."""
    busy = _busy_s()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, "run", "--once", "--config",
                             str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    first = None
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        tail = (tail + [line])[-40:]
        if first is None and "streaming.query: batch 0:" in line:
            first = time.monotonic() - started
    if proc.wait() != 0:
        raise SystemExit(f"compactor run failed: exit {proc.returncode}\n{''.join(tail)}")
    return time.monotonic() - started, first, _busy_s() - busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs of each kind")
    ap.add_argument("--broker", choices=BROKERS, default="kafka")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="startup-"))
    kinds = {"product": _PRODUCT, "with the search": _BASELINE}
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    firsts: dict[str, list[float]] = {k: [] for k in kinds}
    cpus: dict[str, list[float]] = {k: [] for k in kinds}
    with start_broker(args.broker, work) as broker:
        create_topic(broker.bootstrap_servers, "t", 1)
        produce(broker.bootstrap_servers, "t", [Record(b"k", b"v", 0)])
        for i in range(args.runs):
            for kind, code in kinds.items():
                config = work / f"{i}-{kind[0]}.properties"
                config.write_text(
                    f"bootstrap.servers={broker.bootstrap_servers}\ntopics=t\n"
                    f"lake.path={work / f'lake-{i}-{kind[0]}'}\n"
                    f"checkpoint.path={work / f'ck-{i}-{kind[0]}'}\n"
                    "spark.master=local[2]\nspark.ui.enabled=false\n")
                wall, first, cpu = one_run(code, config)
                walls[kind].append(wall)
                cpus[kind].append(cpu)
                if first is not None:
                    firsts[kind].append(first)
                print(f"run {i + 1} {kind}: {wall:.1f} s", file=sys.stderr, flush=True)
    base = statistics.median(walls["with the search"])
    base_cpu = statistics.median(cpus["with the search"])
    print(f"{'':>16} {'median run':>11} {'first commit':>13} {'ratio':>6} {'CPU':>8} "
          f"{'ratio':>6}")
    for kind in kinds:
        wall = statistics.median(walls[kind])
        first = statistics.median(firsts[kind]) if firsts[kind] else float("nan")
        cpu = statistics.median(cpus[kind])
        print(f"{kind:>16} {wall:>9.1f} s {first:>11.1f} s {wall / base:>5.2f}x "
              f"{cpu:>6.1f} s {cpu / base_cpu:>5.2f}x")
    if "SPARK_SUBMIT_OPTS" in os.environ:
        print(f"(SPARK_SUBMIT_OPTS={os.environ['SPARK_SUBMIT_OPTS']})")


if __name__ == "__main__":
    main()
