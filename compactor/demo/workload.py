"""Realistic workloads for the demo, tests and benchmarks: user profiles with updates and
GDPR deletions (tombstones).

``produce`` sends each partition's last record in a batch of its own. Against Apache Kafka
this changes nothing; Tansu, the embedded broker, answers ListOffsets(latest) with the base
offset of the last batch + 1, so a one-record last batch makes its answer the true end.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Producer

from compactor.exceptions import BrokerUnavailableError
from compactor.kafka.clients import with_logger


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    partition: int
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


def partition_for(key: bytes | None, partitions: int) -> int:
    """A stable keyed partitioner (CRC32), so a producer can tell each partition's last record."""
    return zlib.crc32(key or b"") % partitions


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Sequence[Record],
    extra_config: Mapping[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Produce ``records`` in order; raises if any delivery fails."""
    producer = Producer(with_logger({
        "bootstrap.servers": bootstrap_servers, "linger.ms": 20, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False,
        **(extra_config or {}),
    }))
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    last_index = {r.partition: i for i, r in enumerate(records)}
    tails = set(last_index.values())

    def send(r: Record) -> None:
        producer.produce(
            topic, key=r.key, value=r.value, partition=r.partition,
            timestamp=r.timestamp_ms or 0, headers=list(r.headers) or None,
            on_delivery=on_delivery,
        )

    for i, r in enumerate(records):
        if i in tails:
            continue
        while True:
            try:
                send(r)
                break
            except BufferError:
                producer.poll(0.05)
        if progress and i and i % 50_000 == 0:
            progress(i)
        if i % 5_000 == 0:
            producer.poll(0)
    if producer.flush(60) > 0:
        raise BrokerUnavailableError(f"could not deliver records to {topic} within 60s")
    for i in sorted(tails):
        send(records[i])
        producer.flush(30)
    if failures:
        raise BrokerUnavailableError(f"{len(failures)} records were not delivered: {failures[0]}")


_COUNTRIES = ("DE", "FR", "NL", "SE", "PL", "ES", "IT", "NO", "FI", "PT")


def country(uid: int) -> str:
    """A user's country, skewed so that a GROUP BY has a story."""
    return _COUNTRIES[min(len(_COUNTRIES) - 1, int((uid * 2654435761 % 1000) ** 0.5) // 4)]


@dataclass(frozen=True)
class ProfileWorkload:
    """Keys ``user-NNNNNN`` with JSON profiles; skewed updates; some users erased."""

    records: tuple[Record, ...]
    deleted_users: frozenset[bytes]
    null_keys: int

    @property
    def latest(self) -> dict[bytes, bytes | None]:
        state: dict[bytes, bytes | None] = {}
        for r in self.records:
            if r.key is not None:
                state[r.key] = r.value
        return state


def profile_workload(
    users: int, updates: int, partitions: int, seed: int = 7,
    delete_fraction: float = 0.02, null_keys: int = 5, start_ms: int | None = None,
) -> ProfileWorkload:
    """Every user is created, then updated with Zipf-like skew; a fraction are deleted last."""
    rng = random.Random(seed)
    plans = ["free", "pro", "team", "enterprise"]
    records: list[Record] = []

    def profile(uid: int, version: int) -> bytes:
        return json.dumps({
            "user_id": uid, "name": f"User {uid}", "email": f"user{uid}@example.com",
            "plan": plans[(uid + version) % len(plans)], "country": country(uid),
            "version": str(version),
        }, separators=(",", ":")).encode()

    ts = start_ms
    versions: dict[int, int] = {}
    order: Iterable[int] = list(range(users)) + [
        min(users - 1, int(rng.paretovariate(1.2)) - 1 + rng.randrange(0, max(1, users // 50)) * 50)
        for _ in range(max(0, updates - users))
    ]
    for uid in order:
        v = versions.get(uid, -1) + 1
        versions[uid] = v
        key = f"user-{uid:06d}".encode()
        records.append(Record(key, profile(uid, v), partition_for(key, partitions), ts))
    deleted = frozenset(
        f"user-{uid:06d}".encode()
        for uid in rng.sample(range(users), int(users * delete_fraction))
    )
    for key in sorted(deleted):
        records.append(Record(key, None, partition_for(key, partitions), ts,
                              (("reason", b"gdpr-erasure"),)))
    for i in range(null_keys):
        records.insert(rng.randrange(len(records)),
                       Record(None, b'{"orphan":%d}' % i, i % partitions, ts))
    return ProfileWorkload(tuple(records), deleted, null_keys)


def live_changes(
    users: int, partitions: int, already_deleted: frozenset[bytes], rng: random.Random,
    updates: int, erasures: int, timestamp_ms: int,
) -> list[Record]:
    """A moment of a live topic: ``updates`` profile changes and ``erasures`` GDPR deletions.

    Erased users are never updated again, so every erasure must end with no value of its key
    left anywhere; the caller passes the users erased so far.
    """
    alive = [uid for uid in rng.sample(range(users), min(users, updates + erasures + 50))
             if f"user-{uid:06d}".encode() not in already_deleted]
    out = []
    for i, uid in enumerate(alive[:updates + erasures]):
        key = f"user-{uid:06d}".encode()
        value = None if i >= updates else json.dumps(
            {"user_id": uid, "name": f"User {uid}", "email": f"user{uid}@example.com",
             "plan": "pro", "country": country(uid), "version": f"live-{timestamp_ms}"},
            separators=(",", ":")).encode()
        headers = (("reason", b"gdpr-erasure"),) if value is None else ()
        out.append(Record(key, value, partition_for(key, partitions), timestamp_ms, headers))
    return out
