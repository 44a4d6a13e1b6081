"""The hunt's producer: updates and tombstones of a small key space, some of them inside
Kafka transactions that commit or abort, remembered by the offsets the broker gave them."""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer as KafkaProducer

from compactor.demo.workload import partition_for

KEYS = 150  # keys in play at a time
USERS = 20_000  # every key the producer can reach in a run of hours


@dataclass(frozen=True)
class Sent:
    key: bytes
    value: bytes | None
    timestamp_ms: int


class Producer(threading.Thread):
    """Writes a batch of 40 records every 0.2 s (150 keys in play, sliding): plainly, or
    (with ``transactions``) one batch in three inside a transaction, one in four of those
    aborted.

    ``sent[p]`` maps each visible offset of partition p to its record (``visible[p]`` lists
    them in order); ``aborted[p]`` holds the offsets of aborted records; ``known[p]`` is the
    highest offset of p the broker has used for this producer's writes, transaction markers
    included.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int,
                 transactions: bool) -> None:
        super().__init__(daemon=True)
        self.topic, self.partitions = topic, partitions
        self.sent: dict[int, dict[int, Sent]] = {p: {} for p in range(partitions)}
        self.visible: dict[int, list[int]] = {p: [] for p in range(partitions)}  # ascending
        self.aborted: dict[int, set[int]] = {p: set() for p in range(partitions)}
        self.known: dict[int, int] = {p: -1 for p in range(partitions)}
        self.transactions = {"committed": 0, "aborted": 0}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rng = random.Random(42)
        common = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 5, "log_level": 0}
        self._plain = KafkaProducer(common)
        self._tx: Any = None
        if transactions:
            self._tx = KafkaProducer({**common, "transactional.id": f"hunt-{uuid.uuid4().hex}"})
            self._tx.init_transactions(30)

    def run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                batch = []
                for _ in range(40):
                    # The key space slides by one key every 400 records: keys keep
                    # arriving that no tombstone has erased yet (downstream rows to delete).
                    key = b"user-%d" % (self.rng.randrange(KEYS) + seq // 400)
                    value = None if self.rng.random() < 0.08 else b"value-%d" % seq
                    seq += 1
                    batch.append(Sent(key, value, int(time.time() * 1000)))
                mode = "plain"
                if self._tx is not None and self.rng.random() < 1 / 3:
                    mode = "abort" if self.rng.random() < 0.25 else "commit"
                self._send(batch, mode)
                time.sleep(0.2)
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def _send(self, batch: list[Sent], mode: str) -> None:
        producer = self._plain if mode == "plain" else self._tx
        delivered: list[tuple[int, int, Sent]] = []
        failures: list[str] = []

        def report(err: Any, msg: Any, record: Sent) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                delivered.append((msg.partition(), msg.offset(), record))

        if mode != "plain":
            producer.begin_transaction()
        for r in batch:
            producer.produce(self.topic, key=r.key, value=r.value,
                             partition=partition_for(r.key, self.partitions),
                             timestamp=r.timestamp_ms,
                             on_delivery=lambda err, msg, r=r: report(err, msg, r))
        producer.flush(60)  # every record in the log, aborted ones too, before the marker
        if failures:
            raise RuntimeError(f"delivery failed: {failures[:3]}")
        if mode == "commit":
            producer.commit_transaction(30)
        elif mode == "abort":
            producer.abort_transaction(30)
        with self.lock:
            for p, offset, r in sorted(delivered, key=lambda d: (d[0], d[1])):
                if mode == "abort":
                    self.aborted[p].add(offset)
                else:
                    self.sent[p][offset] = r
                    self.visible[p].append(offset)  # one producer: offsets only grow
                self.known[p] = max(self.known[p], offset)
            if mode != "plain":
                self.transactions["committed" if mode == "commit" else "aborted"] += 1
                for p in {p for p, _, _ in delivered}:
                    self.known[p] += 1  # the marker: the next offset, one producer per topic

    def produced(self) -> tuple[int, int, int]:
        """Visible records, visible tombstones and aborted records so far."""
        with self.lock:
            visible = sum(len(rs) for rs in self.sent.values())
            tombstones = sum(1 for rs in self.sent.values() for r in rs.values()
                             if r.value is None)
            aborted = sum(len(a) for a in self.aborted.values())
        return visible, tombstones, aborted
