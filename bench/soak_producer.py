"""The soak's workload: its topics' partitions, the steady producer and the mirror's
configuration."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

from compactor.config import build_config
from compactor.demo.workload import Record, partition_for, produce

PARTITIONS = 4


def _produce(bootstrap: str, topics: list[str], rate: int, keys: int, sent: Any,
             stop: Any) -> None:
    """The producer's loop: ``rate`` records a second to each topic, sent once a second."""
    i = 0
    per_tick = max(1, rate)
    while not stop.is_set():
        tick = time.monotonic()
        for topic in topics:
            records = []
            for _ in range(per_tick):
                key = b"user-%06d" % (i * 7919 % keys)
                value = None if "compact" in topic and i % 100 == 0 else b"v" * 100
                records.append(Record(key, value, partition_for(key, PARTITIONS)))
                i += 1
            produce(bootstrap, topic, records)
            with sent.get_lock():
                sent.value += len(records)
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


class Producer:
    """The steady producer, in a process of its own, as a user's producers are. Run in the
    driver (before 2026-11-26), its librdkafka producers, two a second with their threads
    and allocations, were counted in the driver's memory and threads."""

    def __init__(self, bootstrap: str, topics: list[str], rate: int, keys: int) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with a JVM link
        self.stop = context.Event()
        self._sent = context.Value("q", 0)
        self._process = context.Process(
            target=_produce, args=(bootstrap, topics, rate, keys, self._sent, self.stop),
            name="soak-producer", daemon=True)

    def start(self) -> None:
        self._process.start()

    def join(self, timeout: float) -> None:
        self._process.join(timeout)

    @property
    def sent(self) -> int:
        return int(self._sent.value)


def mirror_config(broker: str, work: Path, topics: list[str], **extra: str) -> Any:
    return build_config({
        "bootstrap.servers": broker, "topics": ",".join(topics),
        "lake.path": str(work / "lake"), "checkpoint.path": str(work / "ckpt"),
        "trigger.interval.ms": "1000", "spark.master": "local[2]", "spark.ui.enabled": "false",
        **extra,
    })
