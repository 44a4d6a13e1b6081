"""What the soak samples in the process it measures: resident memory of the driver and the
processes around it, the lake's files and lag, the broker's answer time. Each reads
``/proc`` or the mirror's own follower, so that sampling adds no delta-rs work to the driver."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from workloads import status_kb, tokio_threads

from compactor.kafka.broker_offsets import OffsetReader
from compactor.lake.layout import topic_paths
from compactor.lake.log_follower import log_view
from compactor.lake.storage import LOCAL


def _children(pid: int) -> list[int]:
    """``pid``'s child processes; none once it has exited (a Python worker may, any time)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return found


def _descendants(pid: int) -> list[int]:
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += _children(child)
    return found


def memory_mb() -> dict[str, float]:
    """Resident memory of this driver, its JVM, Spark's Python workers (the JVM's descendants:
    their sum, how many, the largest, so that more workers and a growing worker differ) and
    the embedded broker, whose in-memory store holds every record produced and so grows by
    design. The broker is the driver's child, not the JVM's: counting every child of the
    driver as a worker (as runs before 2026-11-24 did) put the broker's growth in the
    workers' row."""
    me = os.getpid()
    driver = status_kb(me)
    out = {"driver MB": driver.get("VmRSS", 0) / 1024,
           # the split says whether a rise is memory allocated or library code paged in
           "driver anon MB": driver.get("RssAnon", 0) / 1024,
           "driver file MB": driver.get("RssFile", 0) / 1024,
           "jvm MB": 0.0, "jvm anon MB": 0.0, "workers MB": 0.0, "broker MB": 0.0,
           # delta-rs's tokio blocking pool keeps the threads a burst of reads made: each holds
           # a stack and an allocator cache, so the count is part of the driver's memory story
           "driver threads": float(len(os.listdir(f"/proc/{me}/task"))),
           "driver tokio threads": float(tokio_threads(me))}
    sizes = []
    for pid in _children(me):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        exe = cmdline[0]
        if b"kafka.Kafka" in cmdline or b"tansu" in exe:  # the broker: Apache Kafka or Tansu
            out["broker MB"] += status_kb(pid).get("VmRSS", 0) / 1024
        elif b"java" in exe:
            jvm = status_kb(pid)
            out["jvm MB"] += jvm.get("VmRSS", 0) / 1024
            out["jvm anon MB"] += jvm.get("RssAnon", 0) / 1024
            for worker in _descendants(pid):
                sizes.append(status_kb(worker).get("VmRSS", 0) / 1024)
    out["workers MB"] = sum(sizes)
    return out | {"worker processes": float(len(sizes)),
                  "largest worker MB": max(sizes, default=0.0)}


def lake_files(lake: Path, topic: str,
               ends: dict[tuple[str, int], int]) -> dict[str, float]:
    """The log's files and lag, read through the follower the mirror itself keeps (no table
    opened, no ledger read: the sampler must not add delta-rs work to the process it
    measures; runs before 2026-11-25 opened the log and read the whole erasure ledger, through
    ``collect_status``, every sample), and the ``_delta_log`` files of the log and table."""
    paths = topic_paths(str(lake), topic)
    figures: dict[str, float] = {"files": 0}
    topic_ends = {p: end for (t, p), end in ends.items() if t == topic}
    # Named partitions get an entry even before their first file: their lag is their end.
    view = log_view(paths.log, LOCAL, topic_ends)
    figures["lag"] = float(sum(topic_ends.values()))
    if view is not None:
        per_segment = {(p, seg.base_offset): len(seg.files)
                       for p, plog in view.partitions.items() for seg in plog.segments}
        files = sum(per_segment.values())
        figures["files"] = files
        figures["files/partition"] = files / max(1, len({p for p, _ in per_segment}))
        figures["most files/segment"] = max(per_segment.values(), default=0)
        # Closed: every segment but each partition's newest (the active one collects files
        # until it rolls; consolidation then makes it one).
        newest = {p: max(b for q, b in per_segment if q == p) for p, _ in per_segment}
        figures["most files/closed segment"] = max(
            (n for (p, b), n in per_segment.items() if b != newest[p]), default=0)
        mirrored = {p: 0 if plog.committed_offset is None else plog.committed_offset + 1
                    for p, plog in view.partitions.items()}
        figures["lag"] = float(sum(max(0, end - mirrored[p]) for p, end in topic_ends.items()))
    for name in ("log", "table"):
        log_dir = Path(getattr(paths, name)) / "_delta_log"
        figures[f"{name} _delta_log files"] = (
            len(list(log_dir.iterdir())) if log_dir.exists() else 0)
    return figures



def list_offsets_ms(offsets: OffsetReader, tps: list[tuple[str, int]]) -> float:
    """The broker's own time for the ListOffsets(latest) a micro-batch's source sends."""
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        offsets.offsets(tps, "latest")
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000
