"""Step 5 of :mod:`compactor.cleaner.maintenance`'s pass: vacuum of a topic's tables, when due.

A topic's tables are its log, latest-value table, rejected records and erasure ledger (pruned
to its retention and compacted first), and the downstream tables fed from it. Vacuuming them
opens each one and lists what it would delete, a cost per topic whatever the topic holds, so
a running service vacuums a topic only when something can be there to delete:

- a topic with an erasure deadline: at every pass. Its orphans and the files a crashed run
  removed must go within the deadline, and only the tables know when they were written.
- any other topic: at its first pass of the run (what an earlier run removed), once a removal
  this process made or was told of (:meth:`TopicVacuum.note_removed`) passes the grace, and
  otherwise every ``vacuum.grace.ms`` (orphans, files removed by other writers, commit files
  past the log retention).

A pass run on its own (``compactor clean``) vacuums every topic it covers.

While none of the service's commits is being prepared, a vacuum also deletes the files of the
topic's own tables that no commit references and that are older than the grace (a "full"
vacuum): orphans of a crashed run, and removed files whose remove action a checkpoint left out
(Delta's checkpoints keep a removal only until its grace passes, and the vacuum reads removals
from them). Downstream tables are not swept so: their other writers may have files in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from compactor.cleaner.vacuum import Vacuum, ensure_properties, vacuum_due_ms
from compactor.config import CompactorConfig
from compactor.erasure.ledger import ErasureLedger
from compactor.exceptions import LakeError
from compactor.lake.layout import open_table, topic_paths

log = logging.getLogger(__name__)


class TopicVacuum:
    """Vacuums each topic's tables, and knows when a topic next needs it."""

    def __init__(self, config: CompactorConfig, ledger: ErasureLedger, lock: threading.Lock,
                 nothing_in_flight: Callable[[], bool] | None = None) -> None:
        self._config = config
        self._ledger = ledger
        self._lock = lock
        self._vacuum = Vacuum(config.storage)
        # True when no commit of this process is being prepared (set by the service); only
        # then may orphans younger than an hour be deleted.
        self._nothing_in_flight = nothing_in_flight
        self._removed: dict[str, list[int]] = {}  # topic -> wall-clock ms its removals pass grace
        self._last: dict[str, int] = {}  # topic -> wall-clock ms of its last vacuum in this run

    def note_removed(self, topic: str, now_ms: int | None = None) -> None:
        """Files of ``topic`` were removed now: vacuum it once the grace passes."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self._removed.setdefault(topic, []).append(
            vacuum_due_ms(now, self._config.topic(topic).vacuum_grace_ms))

    def wake_times(self, now_ms: int) -> list[int]:
        """When noted removals pass their grace, from ``now_ms`` on (for the service's wake-up)."""
        return [t for times in self._removed.values() for t in times if t > now_ms]

    def is_due(self, topic: str, now_ms: int) -> bool:
        """Whether a service's pass at ``now_ms`` must vacuum ``topic`` (see the module)."""
        tc = self._config.topic(topic)
        last = self._last.get(topic)
        return (tc.erasure_deadline or last is None
                or any(t <= now_ms for t in self._removed.get(topic, ()))
                or now_ms - last >= tc.vacuum_grace_ms)

    def run(self, topic: str, now_ms: int | None = None) -> int:
        """Vacuum the topic's tables; returns the files deleted."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        paths = topic_paths(self._config.lake_path, topic)
        tc = self._config.topic(topic)
        grace = tc.vacuum_grace_ms
        deleted = 0
        ours = [paths.log, paths.table, paths.rejected, self._ledger.path(topic)]
        theirs = [d.path for d in self._config.downstream if d.topic == topic]
        with self._lock:
            self._ledger.prune(topic, now_ms)
            self._ledger.compact(topic)
        for path in ours + theirs:
            try:
                table = open_table(path, self._config.storage)
            except LakeError as exc:  # one broken table does not stop the others' vacuum
                log.warning("%s", exc)
                continue
            if table is None:
                continue
            # Vacuum commits too: under the lock, so it never races this process's MERGEs.
            with self._lock:
                if path in ours:
                    try:
                        ensure_properties(table, grace)
                    except Exception as exc:
                        log.warning("%s: cannot record the vacuum grace: %s", path, exc)
                idle = self._nothing_in_flight is not None and self._nothing_in_flight()
                # Every topic, not only those with a deadline: a checkpoint written after a
                # removal's grace drops its remove action, and Delta's vacuum then sees an
                # orphan where a removed file (superseded or erased values) still lies.
                sweep = path in ours and idle
                try:
                    deleted += len(self._vacuum.run(path, grace, orphans_past_grace=sweep,
                                                    tidy=sweep))
                    if path == paths.table:
                        deleted += len(self._vacuum.change_data(path, grace, now_ms))
                    if path in ours:
                        self._vacuum.expired_commits(path)
                except LakeError as exc:
                    log.warning("%s", exc)
        self._last[topic] = now
        self._removed[topic] = [t for t in self._removed.get(topic, ()) if t > now]
        return deleted
