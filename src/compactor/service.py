"""The long-running service behind ``compactor run``: the mirror query and its stop rules.

Stop protocol (Ctrl-C or SIGTERM):

1. The signal handler only sets a flag; nothing is interrupted.
2. The main loop waits until no micro-batch is between its first file write and its Delta
   commit, then stops the query.
3. A batch Spark had planned but not started is replayed by the next run from the checkpoint.

A kill -9 at any moment is also safe (see :mod:`compactor.writer`); the flag only avoids
leaving written-but-uncommitted files behind.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType

from compactor.admin import resolve_config
from compactor.config import CompactorConfig
from compactor.writer import BatchStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSummary:
    batches: int
    records: int
    record_bytes: int
    rejected: int
    per_topic: dict[str, int]
    seconds: float
    busy_seconds: float


class Service:
    """Owns the Spark session and the mirror for one configuration."""

    def __init__(self, config: CompactorConfig) -> None:
        self.config = resolve_config(config)
        self._stop = threading.Event()

    def request_stop(self, signum: int | None = None, _frame: FrameType | None = None) -> None:
        if signum is not None:
            log.info("received %s: stopping after the current commit",
                     signal.Signals(signum).name)
        self._stop.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGTERM, self.request_stop)

    def run(
        self, once: bool = False,
        on_batch: Callable[[int, Mapping[str, BatchStats]], None] | None = None,
    ) -> RunSummary:
        """Mirror until stopped (or, with ``once``, until everything available now is in)."""
        from streaming.query import Mirror
        from streaming.session import build_session

        started = time.monotonic()
        spark = build_session(self.config.spark)
        mirror = Mirror(spark, self.config)
        if on_batch is not None:
            mirror.progress.listeners.append(on_batch)
        query = mirror.start(once=once)
        log.info("mirroring %s from %s into %s", ",".join(self.config.topics),
                 self.config.bootstrap_servers, self.config.lake_path)
        try:
            while query.isActive:
                if self._stop.is_set() and not mirror.in_batch:
                    query.stop()
                    break
                query.awaitTermination(1)
            if query.exception() is not None:
                raise mirror.error(query.exception())  # type: ignore[arg-type]
        except Exception as exc:
            from compactor.exceptions import CompactorError

            if isinstance(exc, CompactorError):
                raise
            raise mirror.error(exc) from exc
        finally:
            if query.isActive:
                query.stop()
        p = mirror.progress
        return RunSummary(p.batches, p.records, p.record_bytes, p.rejected, dict(p.per_topic),
                          time.monotonic() - started, p.busy_seconds)
