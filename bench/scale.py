"""What a micro-batch costs as partitions and topics grow, at the same record rate.

    python bench/scale.py                               # the four cases below, ~10 minutes
    python bench/scale.py --cases 4x1,200x1 --seconds 60

Each case (``PxT``: T topics of P partitions): one broker (Apache Kafka by default, one for
every case), a producer in a process of its own sending ``--rate`` records a second in all,
keys spread over every partition of every topic, and ``compactor run``'s engine with a
``--trigger-ms`` trigger, measured for ``--seconds`` from its first micro-batch. Per case it
prints the median and 90th percentile micro-batch time (the mirror's own batch records: ranges,
plan, write, commit, tombstone readers left from the batch before, table) and of the tombstone
readers the service runs in the gap after each batch, the end-to-end lag at the end and the
most of it seen every 10 s (offsets the broker has that the lake does not), the driver's
resident memory, the most data files in a closed segment, and how long the metrics page and
``compactor status --json`` take to answer at the end, with each time's ratio to the first
case's; and the cores the broker and the driver process kept busy while measured (the broker
shares the machine's cores with the mirror here, as it would not in production). Prints
figures and ratios, never asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).parent))

from soak_probes import lake_files, memory_mb  # noqa: E402
from soak_producer import mirror_config  # noqa: E402
from workloads import BROKERS, create_topic, start_broker  # noqa: E402

from compactor.demo.workload import partition_for  # noqa: E402
from compactor.kafka.broker_offsets import OffsetReader  # noqa: E402
from compactor.kafka.clients import with_logger  # noqa: E402
from streaming.service import Service  # noqa: E402

DEFAULT_CASES = "4x1,200x1,1000x1,20x50"
# The mirror's steps of a micro-batch (streaming.query's ``steps``), as the table shows them.
STEPS = ("ranges", "plan", "write", "verify", "wait", "commit", "readers", "table")


def _produce(bootstrap: str, topics: list[str], partitions: int, rate: int,
             stop: Any) -> None:
    """``rate`` records a second over every partition of ``topics``, sent once a second by
    one producer kept for the run, as an application's producer is."""
    producer = Producer(with_logger({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                     "enable.idempotence": False}))
    i = 0
    while not stop.is_set():
        tick = time.monotonic()
        for _ in range(rate):
            key = b"user-%07d" % (i * 7919 % 1_000_003)
            producer.produce(topics[i % len(topics)], key=key, value=b"v" * 100,
                             partition=partition_for(key, partitions))
            i += 1
        producer.poll(0)
        if producer.flush(60) > 0:
            raise RuntimeError(f"could not deliver records to {bootstrap} within 60 s")
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _operator_answers(port: int, conf: Path) -> dict[str, float]:
    """Seconds the running mirror's metrics page and a ``compactor status --json`` (a new
    process beside the mirror, as an operator runs it) take to answer."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as page:
        page.read()
    metrics_s = time.monotonic() - started
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "compactor.cli", "status", "--json", "--config",
                    str(conf)], check=True, capture_output=True, timeout=600)
    return {"metrics s": metrics_s, "status s": time.monotonic() - started}


class BatchTimes(logging.Handler):
    """The mirror's own record of each micro-batch (streaming.query's ``steps``): its id,
    its seconds and its steps."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[int] = []
        self.times: list[float] = []
        self.steps: list[dict[str, float]] = []
        self.after: list[float] = []  # the tombstone readers run after the batch before it

    def emit(self, record: logging.LogRecord) -> None:
        steps = getattr(record, "steps", None)
        if isinstance(steps, dict):
            self.ids.append(getattr(record, "batch_id", -1))
            self.times.append(sum(steps.values()))
            self.steps.append(steps)
            self.after.append(float(getattr(record, "carried_s", 0.0)))


def cpu_s(pid: int | None) -> float:
    """CPU seconds a process has used (Linux's /proc; NaN where that cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_case(broker: Any, work: Path, partitions: int, topics: int,
             args: argparse.Namespace) -> dict[str, float]:
    bootstrap = broker.bootstrap_servers
    names = [f"scale-{partitions}x{topics}-{i}" for i in range(topics)]
    for name in names:
        create_topic(bootstrap, name, partitions, cleanup_policy="compact")
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    producer = context.Process(target=_produce, daemon=True,
                               args=(bootstrap, names, partitions, args.rate, stop))
    producer.start()
    port = _free_port()
    extra = {"trigger.interval.ms": str(args.trigger_ms), "log.cleaner.backoff.ms": "15000",
             "metrics.port": str(port), **dict(kv.split("=", 1) for kv in args.set)}
    service = Service(mirror_config(bootstrap, work, names, **extra))
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "compactor.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in {
        "bootstrap.servers": bootstrap, "topics": ",".join(names),
        "lake.path": str(work / "lake"), "checkpoint.path": str(work / "ckpt")}.items()))
    times = BatchTimes()
    logging.getLogger("streaming.query").addHandler(times)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 600
        while not times.times and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.2)
        first = len(times.times)
        cpu_from = (cpu_s(broker.pid), cpu_s(os.getpid()), time.monotonic())
        tps = [(t, p) for t in names for p in range(partitions)]
        reader = OffsetReader({"bootstrap.servers": bootstrap})
        lags: list[float] = []  # sampled every 10 s: a lag that keeps growing is not held
        until = time.monotonic() + args.seconds
        while (left := until - time.monotonic()) > 0:
            time.sleep(min(10.0, left))
            ends = reader.offsets(tps, "latest")
            lags.append(sum(lake_files(work / "lake", t, ends)["lag"] for t in names))
        measured = times.times[first:]
        took = time.monotonic() - cpu_from[2]
        broker_cpu = (cpu_s(broker.pid) - cpu_from[0]) / took
        driver_cpu = (cpu_s(os.getpid()) - cpu_from[1]) / took
        steps = times.steps[first:]
        after = times.after[first:]
        ends = reader.offsets(tps, "latest")
        lake = [lake_files(work / "lake", t, ends) for t in names]
        memory = memory_mb()
        answers = _operator_answers(port, conf)
    finally:
        stop.set()
        producer.join(30)
        service.request_stop()
        thread.join(180)
        logging.getLogger("streaming.query").removeHandler(times)
    ordered = sorted(measured) or [float("nan")]
    where = {f"{name} s": statistics.median(s[name] for s in steps) if steps else float("nan")
             for name in STEPS}
    return {
        "batches": float(len(measured)),
        "median s": statistics.median(ordered),
        "p90 s": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))],
        "lag": sum(f["lag"] for f in lake),
        "most lag": max(lags, default=float("nan")),
        "driver MB": memory["driver MB"],
        "broker cpu": broker_cpu,
        "driver cpu": driver_cpu,
        "files/closed segment": max(f.get("most files/closed segment", 0) for f in lake),
        **answers,
        **where,
        "readers after s": statistics.median(after) if after else float("nan"),
    }


def machine_speed() -> float:
    """Milliseconds one core takes for ``sum(range(10**6))`` (best of 5): runs on machines of
    different speed compare by it, since the fixed costs (a Spark job, a broker request) do not
    scale with the case."""
    return min(timeit.repeat("sum(range(10**6))", number=1, repeat=5)) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES,
                    help="comma-separated PxT: T topics of P partitions")
    ap.add_argument("--rate", type=int, default=200, help="records a second, in all")
    ap.add_argument("--trigger-ms", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=90.0, help="measured per case")
    ap.add_argument("--broker", choices=BROKERS, default="kafka")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a mirror setting for every case (repeatable), e.g. "
                         "table.merge.interval.ms=60000")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("streaming.query").setLevel(logging.INFO)
    cases = [tuple(int(n) for n in c.split("x")) for c in args.cases.split(",")]
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    results: list[tuple[str, dict[str, float]]] = []
    with start_broker(args.broker, work) as broker:
        for partitions, topics in cases:
            label = f"{topics} topic{'s' if topics > 1 else ''} x {partitions} partitions"
            print(f"{label} ...", flush=True)
            results.append((label, run_case(broker, work / f"{partitions}x{topics}",
                                            partitions, topics, args)))
    base = results[0][1]["median s"]
    print(f"\n{args.rate} records/s in all, trigger {args.trigger_ms} ms, {args.seconds:.0f} s "
          f"measured per case, broker {args.broker}; work dir {work}; "
          f"{os.cpu_count()} cores, sum(range(10**6)) in {machine_speed():.0f} ms")
    print(f"{'case':<32}{'batches':>8}{'median s':>10}{'ratio':>8}{'p90 s':>8}{'lag':>8}"
          f"{'most lag':>9}{'driver MB':>11}{'files/closed seg':>18}{'metrics s':>11}"
          f"{'status s':>10}")
    for label, r in results:
        print(f"{label:<32}{r['batches']:>8.0f}{r['median s']:>10.3f}"
              f"{r['median s'] / base:>7.2f}x{r['p90 s']:>8.3f}{r['lag']:>8.0f}"
              f"{r['most lag']:>9.0f}{r['driver MB']:>11.0f}{r['files/closed segment']:>18.0f}"
              f"{r['metrics s']:>11.2f}{r['status s']:>10.2f}")
    print(f"\nmedian seconds of each step of a micro-batch, and of the tombstone readers run in "
          f"the gap after it (after); cores the broker and the driver process kept busy\n"
          f"{'case':<32}" + "".join(f"{s:>9}" for s in STEPS)
          + f"{'after':>9}{'broker':>9}{'driver':>9}")
    for label, r in results:
        print(f"{label:<32}" + "".join(f"{r[f'{s} s']:>9.2f}" for s in STEPS)
              + f"{r['readers after s']:>9.2f}{r['broker cpu']:>9.2f}{r['driver cpu']:>9.2f}")


if __name__ == "__main__":
    main()
