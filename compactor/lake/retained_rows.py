"""Rows whose records retention removed from the log, deleted from the tables that copy it.

The latest-value table and the dead letters (``L/T/rejected``) hold copies of log records. A
record below its partition's log start (the first segment's base) is one retention removed
(``retention.ms`` / ``retention.bytes`` of a ``delete`` or ``compact,delete`` topic): a
consumer of the log no longer sees it, and no copy keeps it longer. Each table records how
far it followed with app transactions ``compactor-retained-<partition>``, so a deletion runs
once per move of a log start, in one commit whose predicate names partitions and offsets only,
never a key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from deltalake import DeltaTable

from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.segments import PartitionLog
from compactor.lake.storage import failure
from compactor.positions import RETAINED

log = logging.getLogger(__name__)


def log_start(plog: PartitionLog) -> int | None:
    """The partition's first offset still in the log: its first segment's base; past its last
    committed offset when retention removed every segment; None before any record."""
    if plog.segments:
        return plog.log_start_offset
    return None if plog.committed_offset is None else plog.committed_offset + 1


def moved_starts(partitions: Mapping[int, PartitionLog],
                 position: Callable[[str], int | None]) -> dict[int, int]:
    """The partitions whose log start moved past what a table followed (``position``: the
    table's app transactions), with their log starts."""
    moved = {}
    for partition, plog in partitions.items():
        start = log_start(plog)
        done = position(RETAINED.id(partition))
        if start is not None and start > (done if done is not None else 0):
            moved[partition] = start
    return moved


def delete_below(table: DeltaTable, moved: Mapping[int, int], path: str, what: str) -> int:
    """Delete ``table``'s rows below the ``moved`` log starts in one commit that moves each
    partition's ``compactor-retained-<partition>``; how many went. ``what`` names the rows
    in the commit and the log line."""
    if not moved:
        return 0
    predicate = " OR ".join(f"(partition = {p} AND offset < {start})"
                            for p, start in sorted(moved.items()))
    try:
        metrics = table.delete(predicate, commit_properties=operations.properties(
            operations.RETENTION, f"{what} whose records retention removed from the log",
            [RETAINED.moved_to(start, p) for p, start in moved.items()]))
    except Exception as exc:
        raise LakeError(f"removing retained rows from {path} failed: {failure(path, exc)}") \
            from exc
    deleted = int(metrics.get("num_deleted_rows", 0))
    if deleted:
        log.info("%s: removed %d %s whose records retention removed from the log", path,
                 deleted, what)
    return deleted
