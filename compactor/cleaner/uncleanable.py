"""Uncleanable partitions, recorded in the log so that ``compactor status`` can show them.

Kafka keeps a partition whose cleaning failed out of later passes and reports it only
through the running broker's metrics. Here ``status`` is another process, so the cleaner
records the state in the log itself, as two app transactions per partition whose versions are
wall-clock milliseconds: ``compactor-uncleanable-<p>`` (when it was marked) and
``compactor-cleanable-<p>`` (when a pass next succeeded). The partition is uncleanable while
the first is the larger. The reason travels in the marking commit's ``commitInfo`` under
``compactor.cleaner.uncleanable``: an error message, never record bytes.

Protocol:

1. A pass on the partition fails: the cleaner commits an empty transaction that sets the
   marking app transaction, with the reason in the commit's metadata.
2. A later pass on it succeeds: the cleaning commit itself also sets the clearing app
   transaction, so nothing is committed twice.
3. A run that restarts tries every partition again, as Kafka does; the record stays until a
   pass succeeds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from deltalake import DeltaTable, Transaction

from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA
from compactor.positions import CLEANABLE, UNCLEANABLE

REASON_KEY = "compactor.uncleanable"
_HISTORY_LIMIT = 1000  # commits searched for a reason; older ones say so


@dataclass(frozen=True)
class Uncleanable:
    since_ms: int
    reason: str | None  # None when the marking commit is older than the history searched


def _marked_since(table: DeltaTable, partition: int) -> int | None:
    """When the partition was marked, if it still is."""
    return marked_at(table.transaction_version, partition)


def marked_at(position: Callable[[str], int | None], partition: int) -> int | None:
    """:func:`_marked_since` from any source of positions (a log follower's, say)."""
    marked = position(UNCLEANABLE.id(partition)) or 0
    cleared = position(CLEANABLE.id(partition)) or 0
    return marked if marked > cleared else None


def is_marked(table: DeltaTable, partition: int) -> bool:
    return _marked_since(table, partition) is not None


def mark(table: DeltaTable, partition: int, reason: str) -> None:
    """Commit the mark that ``partition`` is uncleanable, with ``reason`` (step 1; the caller
    holds the commit lock and has checked fencing)."""
    now_ms = int(time.time() * 1000)
    try:
        table.create_write_transaction(
            [], "append", LOG_SCHEMA, partition_by=LOG_PARTITION_COLUMNS,
            commit_properties=operations.properties(
                operations.MARK_UNCLEANABLE, f"partition {partition} is uncleanable",
                [UNCLEANABLE.moved_to(now_ms, partition, now_ms=now_ms)],
                {REASON_KEY: json.dumps({"partition": partition, "reason": reason})}),
        )
    except Exception as exc:
        raise LakeError(f"{table.table_uri}: cannot record partition {partition} as "
                        f"uncleanable: {exc}") from exc


def clearing(partition: int, now_ms: int) -> Transaction:
    """The app transaction a successful cleaning commit adds to clear the mark (step 2)."""
    return CLEANABLE.moved_to(now_ms, partition, now_ms=now_ms)


def read(table: DeltaTable, partitions: Iterable[int],
         position: Callable[[str], int | None]) -> dict[int, Uncleanable]:
    """The uncleanable partitions among ``partitions``, with when and why (``position``: the
    snapshot's app transactions, :func:`compactor.lake.app_transactions.position_lookup`)."""
    since = {p: marked_at(position, p) for p in partitions}
    marked = {p: t for p, t in since.items() if t is not None}
    if not marked:
        return {}
    reasons: dict[int, str] = {}
    for commit in table.history(_HISTORY_LIMIT):  # newest first
        raw = commit.get(REASON_KEY)
        if not isinstance(raw, str):
            continue
        entry = json.loads(raw)
        partition = int(entry["partition"])
        if partition in marked and partition not in reasons:
            reasons[partition] = str(entry["reason"])
        if len(reasons) == len(marked):
            break
    return {p: Uncleanable(since, reasons.get(p)) for p, since in marked.items()}
