"""When ``compactor run``'s cleaner passes run, and over which topics.

Between two looks at a partition, only two things can make it due: new records (its dirty
ratio, a full segment) and time (a segment's roll or a dirty record's max lag, a tombstone's
horizon, retention, a vacuum's grace). So a pass right after a micro-batch looks at the
topics that batch committed to, and a pass over every topic runs every
``log.cleaner.backoff.ms`` and at the next instant some deadline falls due
(:meth:`compactor.cleaner.maintenance.LogMaintenance.next_due_ms`), as Kafka's cleaner looks
at every log after its backoff. A micro-batch's pass then costs the topics it wrote, not all
the mirror's topics.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable


class PassSchedule:
    """The topics micro-batches changed since the last pass, and when every topic is next due
    a look (monotonic seconds)."""

    def __init__(self, next_full: float) -> None:
        self._lock = threading.Lock()  # micro-batches report from their own thread
        self._changed: set[str] = set()
        self.next_full = next_full

    def on_batch(self, topics: Iterable[str]) -> None:
        """A micro-batch committed records of ``topics``."""
        with self._lock:
            self._changed.update(topics)

    def everything_now(self) -> None:
        """The next pass looks at every topic (topic configs changed, for one)."""
        self.next_full = -math.inf

    def take(self, now: float) -> list[str] | None:
        """The topics the pass due at ``now`` looks at: None for every topic, an empty list
        when no pass is due."""
        with self._lock:
            changed, self._changed = self._changed, set()
        if now >= self.next_full:
            return None
        return sorted(changed)

    def passed(self, every_topic: bool, wake: float) -> None:
        """A pass ran; ``wake`` is when some topic is next due (the backoff after it, or an
        earlier deadline)."""
        self.next_full = wake if every_topic else min(self.next_full, wake)
