"""Progress of long work, logged to stderr: a catch-up ingest and the cleaner's passes.

An operator watching a first mirror of a large topic wants to know how far it is, how fast it
goes and when it will be done; Kafka's consumer-lag tools answer this with the broker's end
offsets against the committed position, and so does this module. The broker is asked at most
every ``every_s`` seconds, so progress costs one ListOffsets per interval, never one per batch,
and it is asked from a thread of its own: a ListOffsets of every partition of many topics
would otherwise hold up the micro-batch that happened to be due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from compactor.cleaner.maintenance import PassReport
from compactor.ingest.batch_stats import BatchStats

log = logging.getLogger(__name__)

EndOffsets = Mapping[tuple[str, int], int]


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class IngestProgress:
    """Turns micro-batch commits into "n of m, rate, time to go" lines per topic.

    ``broker_ends`` returns the broker's end offset of each (topic, partition); it may raise
    or return nothing when the broker is away, and progress then reports the rate alone.
    """

    def __init__(self, broker_ends: Callable[[], EndOffsets], every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._broker_ends = broker_ends
        self._every_s = every_s
        self._clock = clock
        self._next: dict[tuple[str, int], int] = {}
        self._ends: dict[tuple[str, int], int] = {}
        self._started = clock()  # rates count from the start of the run, Spark's start included
        self._topics: set[str] = set()
        self._records: dict[str, int] = {}
        self._last_log = float("-inf")
        self._lock = threading.Lock()  # the counts, between the batch and the report thread
        self._report: threading.Thread | None = None

    def on_batch(self, _batch_id: int, stats: Mapping[str, BatchStats]) -> None:
        """Count a batch; once an interval, report from a thread of its own (the previous
        report still running skips this one)."""
        now = self._clock()
        with self._lock:
            for topic, s in stats.items():
                self._topics.add(topic)
                self._records[topic] = self._records.get(topic, 0) + s.read
                for partition, offset in s.next_offsets.items():
                    self._next[(topic, partition)] = offset
        if now - self._last_log < self._every_s or \
                (self._report is not None and self._report.is_alive()):
            return
        self._last_log = now
        self._report = threading.Thread(target=self._log_lines, args=(now,),
                                        name="ingest-progress", daemon=True)
        self._report.start()

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the report under way, if any."""
        if self._report is not None:
            self._report.join(timeout_s)

    def _log_lines(self, now: float) -> None:
        try:
            ends = self._broker_ends()
        except Exception as exc:  # progress must never stop the mirror
            log.debug("progress: broker end offsets unavailable: %s", exc)
        else:
            with self._lock:
                self._ends.update(ends)
        for line in self.lines(now):
            log.info("%s", line)

    def lines(self, now: float) -> list[str]:
        """One line per topic: records, rate, and the lag behind the broker's end offsets."""
        with self._lock:
            return self._lines(now)

    def _lines(self, now: float) -> list[str]:
        out = []
        elapsed = max(now - self._started, 1e-3)
        by_topic: dict[str, list[tuple[str, int]]] = {}  # one scan, not one per topic
        for key in self._next:
            by_topic.setdefault(key[0], []).append(key)
        for topic in sorted(self._topics):
            records = self._records.get(topic, 0)
            rate = records / elapsed
            parts = by_topic.get(topic, [])
            known = [k for k in parts if k in self._ends]
            lag = sum(max(0, self._ends[k] - self._next[k]) for k in known)
            text = f"ingest {topic}: {records:,} records in {_duration(elapsed)}, {rate:,.0f}/s"
            if known:
                done = sum(self._next[k] for k in known)
                total = done + lag
                pct = 100.0 * done / total if total else 100.0
                text += f"; lag {lag:,} offsets ({pct:.1f}% of the broker's end)"
                if lag and rate > 0:
                    text += f", about {_duration(lag / rate)} to catch up at this rate"
                elif not lag:
                    text += ", caught up"
            out.append(text)
        return out


def log_pass_end(report: PassReport) -> None:
    cleaned = report.cleaned
    if not cleaned and not report.vacuumed:
        return
    dropped = sum(o.result.stats.records_dropped for o in cleaned if o.result)
    written = sum(o.result.stats.bytes_written for o in cleaned if o.result)
    log.info("cleaning pass done in %.1fs: %d partitions cleaned, %d records dropped, "
             "%.1f MB written, %d files vacuumed", report.seconds, len(cleaned), dropped,
             written / 1e6, report.vacuumed)
