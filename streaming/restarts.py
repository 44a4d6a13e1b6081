"""Restarting the mirror query after a failure of Spark's own machinery, not of the data.

Spark plans a Python data source in a Python process it starts and waits a fixed 10 s for
that process to connect back (``PythonWorkerFactory``; no setting changes it). On a host busy
enough that the interpreter and PySpark take longer to load, the query fails before it reads a
record: "Python worker failed to connect back". Nothing was committed by the failed attempt
(a batch commits to Delta and then to the checkpoint, and a restart replays an uncommitted
one), so the run starts the query again from its checkpoint, a few times in a row at most.
Every other failure ends the run as before.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.streaming.query import StreamingQuery

from streaming.exceptions import first_line

log = logging.getLogger(__name__)

# Spark's words when a Python worker it started did not connect back in time.
TRANSIENT = ("Python worker failed to connect back",)
MAX_IN_A_ROW = 3  # restarts without a micro-batch committed between them


class Restarts:
    """Decides whether a failed mirror query is started again."""

    def __init__(self, max_in_a_row: int = MAX_IN_A_ROW) -> None:
        self._max = max_in_a_row
        self._in_a_row = 0
        self._batches_at_last = -1

    def allow(self, mirror: Any, failure: BaseException) -> bool:
        """Whether to start the query again after ``failure``: a transient failure outside
        the mirror's own batch code, fewer than the allowed restarts since the last batch."""
        text = str(failure)
        if mirror.failure is not None or not any(t in text for t in TRANSIENT):
            return False
        batches = mirror.totals.batches
        self._in_a_row = 1 if batches != self._batches_at_last else self._in_a_row + 1
        self._batches_at_last = batches
        if self._in_a_row > self._max:
            return False
        log.warning("the streaming query failed (%s): a start-up failure of Spark's Python "
                    "workers, not of the data; starting it again from its checkpoint "
                    "(%d of %d in a row)", first_line(failure)[:300], self._in_a_row, self._max)
        return True

    def start(self, mirror: Any, once: bool) -> StreamingQuery:
        """``mirror.start(once)``, started again while it fails as :meth:`allow` permits
        (with ``spark.python.use.daemon=false`` creating the source starts such a process)."""
        while True:
            try:
                query: StreamingQuery = mirror.start(once=once)
                return query
            except Exception as exc:
                if not self.allow(mirror, exc):
                    raise
