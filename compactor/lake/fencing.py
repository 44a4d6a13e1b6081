"""Writer generations: a newer ``compactor run`` on a topic fences the older one.

Two mirrors of one topic into one lake would fight: each commit of one makes the other's
planned offsets and cleaner checkpoints stale. The offset and checkpoint checks already keep
the log correct (nothing is written twice), but the fight itself must end with a clear
message. Kafka ends the same fight between two producers with one transactional id by
epochs: the newer one bumps the epoch and the older one is fenced at its next write. So does
this module, with the log's Delta app transaction ``compactor-writer``.

Protocol:

1. ``compactor run`` starts: per topic it reads ``compactor-writer`` (G, or none) and commits
   G + 1 in an empty commit of the log. That is its generation.
2. Before every ingest or cleaning commit of that run, under the process's commit lock, it
   re-reads the log: a different generation means a newer run claimed the topic, and this
   one stops with :class:`FencedError` before committing (exit code 4).
3. ``compactor clean`` claims nothing and checks nothing: a one-off pass beside a running
   mirror is allowed; its commits are guarded by the cleaner checkpoint as usual.

The check and the commit are two steps, so a claim landing between them lets one last commit
of the old run through; the offset check of step 2 in :mod:`compactor.ingest.writer` still refuses
any offset twice.
"""

from __future__ import annotations

import time

from deltalake import DeltaTable

from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, ensure_table
from compactor.lake.storage import Storage, failure
from compactor.positions import WRITER


class FencedError(LakeError):
    """A newer ``compactor run`` claimed the topic's log; this one must stop."""


def claim(log_path: str, storage: Storage) -> int:
    """Take the next writer generation of ``log_path`` (step 1); returns it."""
    table = ensure_table(log_path, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=storage)
    current = WRITER.read(table)
    mine = (current or 0) + 1
    try:
        table.create_write_transaction(
            [], "append", LOG_SCHEMA, partition_by=LOG_PARTITION_COLUMNS,
            commit_properties=operations.properties(
                operations.CLAIM_WRITER, f"writer generation {mine} owns the log",
                [WRITER.moved_to(mine, now_ms=int(time.time() * 1000))]),
        )
    except Exception as exc:
        raise LakeError(f"{log_path}: could not claim the log for this run: "
                        f"{failure(log_path, exc)}") from exc
    return mine


def check(table: DeltaTable, mine: int | None) -> None:
    """Raise if a newer run claimed the log of ``table``, a fresh snapshot (step 2)."""
    if mine is not None:
        check_generation(table.table_uri, mine, WRITER.read(table))


def check_generation(uri: str, mine: int | None, current: int | None) -> None:
    """Raise if a newer run claimed the log, given its generation ``current`` read from a fresh
    snapshot (step 2)."""
    if mine is not None and current is not None and current != mine:
        raise FencedError(
            f"{uri}: another 'compactor run' claimed this log (writer generation "
            f"{current}; this run holds {mine}). Only one run may mirror a topic into a lake; "
            "this one stops without committing. Stop the other run first if this one should "
            "be the one that runs."
        )
