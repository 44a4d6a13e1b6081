"""A warning when cleaning passes outlast what a topic's erasure deadline reserves for one.

A topic with an erasure deadline M is cleaned at M - vacuum grace - A, where A (a fifth of
M, at least 3 s: :attr:`compactor.config.model.TopicConfig.pass_allowance_ms`) is left for
waking up, the pass, its commit and the micro-batch commits it waits behind. A pass that
takes longer than A (a loaded host, a large downstream table rewritten for each erasure)
can finish an erasure after M. The pass cannot take less time; the operator can give it
more, so the service says so, before the missed deadlines are counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from compactor.config import CompactorConfig

log = logging.getLogger(__name__)

REPEAT_S = 600.0  # one warning per topic this often while passes stay too long


def outlasted(config: CompactorConfig, topics: Iterable[str], seconds: float) -> list[str]:
    """The ``topics`` whose erasure deadline reserves less than ``seconds`` for a pass (those
    whose deadline is already best effort are warned about at start)."""
    return [t for t in topics if config.topic(t).erasure_deadline
            and not config.topic(t).deadline_best_effort
            and seconds * 1000 > config.topic(t).pass_allowance_ms]


class AllowanceWatch:
    """Warns, at most every :data:`REPEAT_S` per topic, when a pass outlasts its allowance."""

    def __init__(self, config: CompactorConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._warned: dict[str, float] = {}

    def check(self, topics: Iterable[str], seconds: float) -> list[str]:
        """Warn about the ``topics`` a pass of ``seconds`` outlasted; returns those warned."""
        now = self._clock()
        warned = []
        for topic in outlasted(self._config, topics, seconds):
            if now - self._warned.get(topic, -REPEAT_S) < REPEAT_S:
                continue
            self._warned[topic] = now
            tc = self._config.topic(topic)
            log.warning(
                "%s: a cleaning pass took %.1f s, longer than the %.1f s its erasure deadline "
                "leaves for one (max.compaction.lag.ms=%d: a fifth of it, at least 3 s), so "
                "erasures may finish after the deadline; raise max.compaction.lag.ms or give "
                "'compactor run' more cores", topic, seconds, tc.pass_allowance_ms / 1000,
                tc.max_compaction_lag_ms)
            warned.append(topic)
        return warned
