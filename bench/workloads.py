"""Seeded workloads and the raw limits the benchmarks compare against.

The skewed workload is what a compacted topic of user profiles sees: a few keys are updated
all the time and most rarely (Zipf), about 1% of the records are tombstones, values are
~100-byte JSON documents. The same seed gives the same records, partitions and order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.demo.workload import Record, partition_for


@dataclass(frozen=True)
class Skewed:
    records: int = 2_000_000
    keys: int = 200_000
    zipf: float = 1.0  # exponent: the key of rank r is chosen with weight 1 / r**zipf
    tombstones: float = 0.01
    value_bytes: int = 100
    partitions: int = 4
    seed: int = 7

    def generate(self) -> Iterator[Record]:
        """The records in production order, each key always in the same partition."""
        rng = np.random.default_rng(self.seed)
        weights = 1.0 / np.arange(1, self.keys + 1) ** self.zipf
        ranks = rng.choice(self.keys, size=self.records, p=weights / weights.sum())
        key_of_rank = rng.permutation(self.keys)  # hot keys spread over the partitions
        dead = rng.random(self.records) < self.tombstones
        pad = rng.integers(0, 2**63, size=self.records)
        names = [b"user-%07d" % k for k in range(self.keys)]
        parts = [partition_for(n, self.partitions) for n in names]
        filler = self.value_bytes - 60
        for i in range(self.records):
            k = int(key_of_rank[ranks[i]])
            value = None if dead[i] else (
                b'{"id":%d,"email":"user%d@example.com","v":%d,"bio":"%s"}'
                % (k, k, i, (b"%x" % int(pad[i])).ljust(filler, b"."))
            )
            yield Record(names[k], value, parts[k])

    def describe(self) -> str:
        return (f"{self.records:,} records over {self.keys:,} keys (Zipf {self.zipf}), "
                f"{self.tombstones:.0%} tombstones, ~{self.value_bytes}-byte values, "
                f"{self.partitions} partitions, seed {self.seed}")


BROKERS = ("kafka", "tansu")


def start_broker(kind: str, work: Path) -> Any:
    """The broker a benchmark runs against, as a context manager: Apache Kafka (one KRaft node,
    the tests' ``tests/kafka``, jars fetched with Maven on first use) or the demo's Tansu."""
    if kind == "kafka":
        root = str(Path(__file__).resolve().parent.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
        from tests.kafka.broker import KafkaBroker

        return KafkaBroker(work / "kafka")
    from compactor.demo.broker import EmbeddedBroker

    return EmbeddedBroker(work / "broker.log")


def create_topic(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"cleanup.policy": "compact", **{k.replace("_", "."): v for k, v in config.items()}}
    admin.create_topics([NewTopic(topic, partitions, 1, config=settings)])[topic].result()
    # The controller answers once the topic is committed; the broker may not serve its
    # metadata yet (many partitions), and a mirror started then would find no topic.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} was created but its metadata did not appear in 60 s")


def consume_loop(bootstrap: str, topic: str, partitions: int, expected: int) -> tuple[float, int]:
    """The raw ingest limit: one consumer over every partition, consume() in batches of 10,000,
    touching each key and value, with the mirror's fetch settings (librdkafka's default
    fetch.queue.backoff.ms of 1 s would make the limit four times slower). Returns (seconds,
    record bytes)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = nbytes = 0
    start = time.perf_counter()
    while seen < expected:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                seen += 1
                nbytes += len(m.key() or b"") + len(m.value() or b"")
    took = time.perf_counter() - start
    consumer.close()
    return took, nbytes


def parquet_files(table_root: Path) -> list[Path]:
    return sorted(p for p in table_root.rglob("*.parquet") if "_delta_log" not in p.parts)


def parquet_rewrite(files: list[Path], out: Path, threads: int) -> tuple[float, int]:
    """The raw cleaning limit: read every file whole and write it again (zstd, as the cleaner
    does), ``threads`` files at a time. Returns (seconds, on-disk bytes read)."""
    out.mkdir(parents=True, exist_ok=True)

    def rewrite(i_path: tuple[int, Path]) -> int:
        i, path = i_path
        pq.write_table(pq.read_table(path), out / f"{i}.parquet", compression="zstd")
        return path.stat().st_size

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        nbytes = sum(pool.map(rewrite, enumerate(files)))
    return time.perf_counter() - start, nbytes


def bytes_added(table_root: Path) -> int:
    """On-disk bytes of every file any commit of a Delta table added (rewrites included)."""
    total = 0
    for entry in sorted((table_root / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                total += int(action["add"]["size"])
    return total


def status_kb(pid: int | str = "self") -> dict[str, int]:
    """The memory figures of ``/proc/<pid>/status`` in kB, read at once (none once the process
    has exited): ``VmRSS`` is ``RssAnon`` (the heap, stacks, allocator arenas: what a leak
    would grow) plus ``RssFile`` (pages of mapped files, mostly shared libraries' code,
    resident from the first time a code path runs) plus ``RssShmem``; ``VmHWM`` is its peak."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {name: int(rest.split()[0]) for name, _, rest in (line.partition(":") for line in lines)
            if rest.strip().endswith(" kB")}


def tokio_threads(pid: int | str = "self") -> int:
    """Threads of delta-rs's tokio runtime in a process (its workers and blocking pool share
    the name); a thread that exits while counted is left out."""
    count = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            count += Path(f"/proc/{pid}/task/{task}/comm").read_text().startswith("tokio")
        except OSError:
            continue
    return count


def rss_mb(field: str = "VmRSS") -> float:
    """One figure of this process's ``status_kb``, in MB."""
    kb = status_kb().get(field)
    return float("nan") if kb is None else kb / 1024


def peak_rss_mb() -> float:
    """This process's peak resident set size (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cores() -> int:
    return os.cpu_count() or 2


def alternate_sessions(script: str, kinds: Iterable[str], rounds: int,
                       *args: str) -> dict[str, list[dict[str, float]]]:
    """Run ``script --session KIND ARGS...`` in a process of its own for each kind, ``rounds``
    times, alternating; each prints its figures as a JSON object on its last line."""
    seen: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for _ in range(rounds):
        for kind in seen:
            done = subprocess.run([sys.executable, script, "--session", kind, *args],
                                  capture_output=True, text=True, check=True)
            seen[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return seen
