"""The soak's records of a run (each micro-batch's parts, each sample), spooled to files in
the run's directory, and the table of a micro-batch's parts."""

from __future__ import annotations

import json
import logging
import statistics
import threading
from pathlib import Path
from typing import Any


class Spool:
    """Records of the run, kept on disk until the report.

    The driver is the process this benchmark measures, and the records it kept in memory
    (Spark's and the mirror's parts of each micro-batch, each sample's figures: ~2 KB a
    micro-batch, about 7 MB an hour) grew it as a leak would. Each record is one JSON line,
    written when it is made; the run keeps only counters."""

    def __init__(self, path: Path) -> None:
        self._path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()  # the mirror's thread logs, the sampler's thread samples
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
            self.count += 1

    def read(self) -> list[dict[str, Any]]:
        with self._lock:
            self._file.flush()
        with self._path.open(encoding="utf-8") as lines:
            return [json.loads(line) for line in lines]


class Batches:
    """Each micro-batch's time and parts: Spark's (its progress reports) and the mirror's own
    steps (its batch log record), spooled as they come and merged by batch id at the end."""

    def __init__(self, path: Path) -> None:
        self.spark = Spool(path.with_suffix(".spark.jsonl"))
        self.mirror = Spool(path.with_suffix(".mirror.jsonl"))
        self._last: dict[str, int] = {}  # per query, the last batch id spooled

    def poll(self) -> None:
        """Spool the batches Spark reported since the last poll: each micro-batch's time, and
        Spark's own parts of it (``durationMs``)."""
        from pyspark.sql import SparkSession

        # The engine runs in another thread; the active session is per thread, the default is
        # not.
        session = SparkSession.builder.getOrCreate()
        for query in session.streams.active:
            last = self._last.get(str(query.id), -1)
            for p in query.recentProgress:
                # A trigger that ran a batch has addBatch; an idle one (nothing new) has not.
                # Spark's numInputRows stays 0: the mirror never runs the ranges DataFrame.
                if "addBatch" in p.durationMs and p.batchId > last:
                    self.spark.write({
                        "id": p.batchId, "time": p.durationMs.get("triggerExecution", 0) / 1000,
                        **{f"spark {k}": v / 1000 for k, v in p.durationMs.items()
                           if k != "triggerExecution"}})
                    last = p.batchId
            self._last[str(query.id)] = last

    def load(self) -> tuple[dict[int, float], dict[int, dict[str, float]]]:
        """Each batch's time, and each batch's parts, Spark's and the mirror's."""
        times: dict[int, float] = {}
        parts: dict[int, dict[str, float]] = {}
        for record in self.spark.read():
            times[record["id"]] = record.pop("time")
            parts.setdefault(record.pop("id"), {}).update(record)
        for record in self.mirror.read():
            parts.setdefault(record.pop("id"), {}).update(record)
        return times, parts


class _Steps(logging.Handler):
    """The mirror's own steps of each micro-batch (the ``steps`` of its batch log record)."""

    def __init__(self, spool: Spool) -> None:
        super().__init__(logging.INFO)
        self.spool = spool

    def emit(self, record: logging.LogRecord) -> None:
        steps = getattr(record, "steps", None)
        if steps is not None:
            self.spool.write({"id": record.batch_id,  # type: ignore[attr-defined]
                              **{f"mirror {k}": v for k, v in steps.items()}})


def capture_steps(spool: Spool) -> logging.Handler:
    """Spool the mirror's batch records; its warnings still print."""
    mirror_log = logging.getLogger("streaming.query")
    mirror_log.setLevel(logging.INFO)
    handler = _Steps(spool)
    mirror_log.addHandler(handler)
    if mirror_log.propagate:
        quiet = logging.StreamHandler()
        quiet.setLevel(logging.WARNING)
        mirror_log.addHandler(quiet)
        mirror_log.propagate = False
    return handler


def print_parts(parts: dict[int, dict[str, float]], first: list[int],
                 last: list[int] | None = None) -> None:
    """Medians of each part over the batches ``first`` (and ``last``, with the ratio)."""
    keys = sorted({key for i in first + (last or []) for key in parts.get(i, {})})
    for key in keys:
        a = statistics.median(parts.get(i, {}).get(key, 0.0) for i in first)
        if last is None:
            print(f"    {key:<40} {a:>10.3f}")
            continue
        b = statistics.median(parts.get(i, {}).get(key, 0.0) for i in last)
        ratio = f"{b / a:>9.2f}x" if a else f"{'-':>10}"
        print(f"    {key:<40} {a:>10.3f} {b:>10.3f} {ratio}")
