"""When the lake last held everything its topic had, and reconciling when that is too long ago.

Kafka removes a tombstone no sooner than ``delete.retention.ms`` after its first cleaning, which
is after the tombstone was written, and removes the values it supersedes at that first cleaning.
So if every record the broker held before a time T is in the lake, a tombstone the lake lacks was
written after T and stays on the broker until T + ``delete.retention.ms`` at least: a mirror that
reads it before then cannot miss it. T is the topic's *caught-up time*. When the wall clock
passes T + ``delete.retention.ms`` (the mirror was stopped, or lags that far behind), the topic
may have erased keys the lake will never see a tombstone for, and the lake is reconciled with the
topic's key set (:mod:`compactor.erasure.reconcile`).

How T is known, per compacted topic:

1. Every observation interval (an eighth of ``delete.retention.ms``, between 1 and 30 s) the
   broker's log ends of every partition are listed at time t and kept as an observation.
2. Once the log's ingest positions reach an observation's ends (or a partition's log was empty),
   every record written before t is in the lake: T moves to t.
3. T is committed to the log as ``compactor-caught-up`` (a commit of that position alone) when it
   moved by a quarter of ``delete.retention.ms``, and after each reconciliation, so a restarted
   run knows the T of the one before it. A log without the position was made by a version that
   did not keep it: its T is unknown and the first check reconciles, unless it holds no record
   yet (a new lake), whose T is the time the run started.

``delete.retention.ms`` is the topic's value as the mirror resolved it (the broker's, unless the
mirror's configuration overrides it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from compactor.config import CompactorConfig
from compactor.erasure.downstream import DownstreamEraser
from compactor.erasure.ledger import ErasureLedger
from compactor.erasure.reconcile import Reconciled, reconcile
from compactor.kafka.broker_offsets import OffsetReader
from compactor.lake import fencing, log_commit, operations
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, topic_paths
from compactor.lake.log_follower import LogFollower, follow
from compactor.positions import CAUGHT_UP, WRITER

log = logging.getLogger(__name__)

MIN_LOOK_MS = 1_000
MAX_LOOK_MS = 30_000


@dataclass(frozen=True)
class _Seen:
    """The broker's log ends at one time (step 1)."""

    at_ms: int
    ends: Mapping[int, int]  # partition -> end offset; empty logs left out


def look_every_ms(delete_retention_ms: int) -> int:
    """The observation interval of a topic (step 1)."""
    return max(MIN_LOOK_MS, min(MAX_LOOK_MS, delete_retention_ms // 8))


def caught_up_time(seen: list[_Seen], next_offsets: Mapping[int, int]) -> int | None:
    """The latest observation the lake's next offsets cover (step 2), if any."""
    covered = [s.at_ms for s in seen
               if all(next_offsets.get(p, 0) >= end for p, end in s.ends.items())]
    return max(covered) if covered else None


@dataclass
class SourceGap:
    """Caught-up times of the configured compacted topics, and their reconciliation."""

    config: CompactorConfig
    lock: threading.Lock
    ledger: ErasureLedger
    eraser: DownstreamEraser
    generations: Mapping[str, int] = field(default_factory=dict)
    # Called with each reconciliation (metrics).
    listeners: list[Callable[[Reconciled], None]] = field(default_factory=list)
    _seen: dict[str, list[_Seen]] = field(default_factory=dict)
    _caught_up: dict[str, int] = field(default_factory=dict)  # T as this process knows it
    _next_look: dict[str, int] = field(default_factory=dict)
    _reader: OffsetReader | None = None

    def topics(self) -> list[str]:
        return [t for t in self.config.topics if self.config.topic(t).compact]

    def start(self, now_ms: int | None = None) -> None:
        """A log that holds no record yet and no caught-up time gets the time now (step 3):
        call before the mirror's first commit."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for topic in self.topics():
            follower = follow(topic_paths(self.config.lake_path, topic).log, self.config.storage)
            view = follower.view()
            if view is None or follower.position(CAUGHT_UP.id()) is not None:
                continue
            if all(p.committed_offset is None for p in view.partitions.values()):
                self._save(topic, follower, now)

    def check(self, now_ms: int | None = None) -> list[Reconciled]:
        """Observe, move T and reconcile the topics whose gap passed ``delete.retention.ms``
        (steps 1-3); returns the reconciliations done."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        due = [t for t in self.topics() if now >= self._next_look.get(t, 0)]
        if not due:
            return []
        ends = self._ends(due)
        done = []
        for topic in due:
            retention = self.config.topic(topic).delete_retention_ms
            self._next_look[topic] = now + look_every_ms(retention)
            result = self._check_topic(topic, now, ends.get(topic, {}), retention)
            if result is not None:
                done.append(result)
                for listener in self.listeners:
                    listener(result)
        return done

    def _ends(self, topics: list[str]) -> dict[str, dict[int, int]]:
        """Step 1 for ``topics``: one listing of log starts and ends; empty logs left out."""
        if self._reader is None:
            self._reader = OffsetReader(self.config.kafka_client_config())
        tps = self._reader.partitions(topics, None)
        starts = self._reader.offsets(tps, "earliest")
        latest = self._reader.offsets(tps, "latest")
        ends: dict[str, dict[int, int]] = {t: {} for t in topics}
        for (topic, partition), end in latest.items():
            if end > starts[(topic, partition)]:
                ends[topic][partition] = end
        return ends

    def _check_topic(self, topic: str, now: int, ends: Mapping[int, int],
                     retention: int) -> Reconciled | None:
        follower = follow(topic_paths(self.config.lake_path, topic).log, self.config.storage)
        view = follower.view()
        if view is None:
            return None
        seen = self._seen.setdefault(topic, [])
        seen.append(_Seen(now, dict(ends)))
        next_offsets = {p: plog.committed_offset + 1 for p, plog in view.partitions.items()
                        if plog.committed_offset is not None}
        covered = caught_up_time(seen, next_offsets)
        if covered is not None:
            self._caught_up[topic] = max(covered, self._caught_up.get(topic, covered))
            seen[:] = [s for s in seen if s.at_ms > covered]
        saved = follower.position(CAUGHT_UP.id())
        known = [t for t in (saved, self._caught_up.get(topic)) if t is not None]
        caught_up = max(known) if known else None
        if caught_up is not None and now - caught_up < retention:
            if saved is None or caught_up - saved >= max(retention // 4, 1):
                self._save(topic, follower, caught_up)
            return None
        if caught_up is None:
            log.warning("%s: the lake does not say when it last held all the topic had (made "
                        "by an earlier version); reconciling it with the topic's keys once",
                        topic)
        else:
            log.warning("%s: the lake last held all the topic had %.0f s ago, longer than its "
                        "delete.retention.ms (%d ms): Kafka may have removed tombstones the "
                        "mirror never read; reconciling the lake with the topic's keys", topic,
                        (now - caught_up) / 1000, retention)
        result = reconcile(self.config, topic, now, self.lock, self.ledger, self.eraser,
                           self.generations.get(topic))
        self._caught_up[topic] = now
        seen[:] = [s for s in seen if s.at_ms > now]
        self._save(topic, follower, now)
        return result

    def _save(self, topic: str, follower: LogFollower, caught_up: int) -> None:
        """Commit T (step 3), unless the log already holds a later one."""
        generation = self.generations.get(topic)
        uri = topic_paths(self.config.lake_path, topic).log

        def check(position: Callable[[str], int | None]) -> None:
            fencing.check_generation(uri, generation, position(WRITER.id()))

        now_ms = int(time.time() * 1000)
        with self.lock:
            follower.view()
            saved = follower.position(CAUGHT_UP.id())
            if saved is not None and saved >= caught_up:
                return
            log_commit.append(follower, [], [CAUGHT_UP.moved_to(caught_up, now_ms=now_ms)],
                              operations.CAUGHT_UP,
                              f"{topic}: the log held all the topic had at {caught_up} ms",
                              check, LOG_SCHEMA, LOG_PARTITION_COLUMNS, now_ms)
