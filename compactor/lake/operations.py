"""What each of our commits did, named in its ``commitInfo``.

delta-rs names every ``create_write_transaction`` commit ``WRITE`` / ``Append`` and refuses
another ``operation``, even for a commit that only removes files. So every commit of ours also
carries ``compactor.operation`` (one of the names below, for machines) and ``userMetadata`` (a
sentence, the column Delta's ``DESCRIBE HISTORY`` shows people). MERGE commits keep delta-rs's
``MERGE`` and carry both keys too.

Delta streaming readers of ``L/T/log`` or ``L/T/table`` must set ``skipChangeCommits=true``:
cleaning, retention and the latest-value MERGE remove files with ``dataChange=true`` (records
really disappear), which a Delta stream otherwise refuses ("Detected a data update").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from deltalake import Transaction
from deltalake.transaction import CommitProperties

OPERATION_KEY = "compactor.operation"

CREATE_TABLE = "CREATE TABLE"  # an empty table with the product's properties
SET_PROPERTIES = "SET PROPERTIES"  # table properties (the vacuum grace, the topic's id)
INGEST = "INGEST"  # a micro-batch's records appended to the log (or rejected)
CLEAN = "CLEAN"  # compaction of dirty segments, possibly with retention in the same commit
RETENTION = "RETENTION"  # whole segments past retention.ms / retention.bytes removed
REWRITE_SEGMENTS = "REWRITE SEGMENTS"  # a segment's files as one, no record changed
CHECKPOINT = "CHECKPOINT"  # only the cleaner checkpoint (or an uncleanable mark) moved
MARK_UNCLEANABLE = "MARK UNCLEANABLE"
CLAIM_WRITER = "CLAIM WRITER"  # a run took over the log (fencing generation)
MERGE_LATEST = "MERGE LATEST"  # the latest-value table brought up to the log
ERASE_DOWNSTREAM = "ERASE DOWNSTREAM"  # tombstoned keys deleted from a downstream table
RECORD_ERASURES = "RECORD ERASURES"  # tombstones and done events appended to the ledger
COMPACT_LEDGER = "COMPACT LEDGER"  # the ledger's small files rewritten as few, no event changed
COMPACT_TABLE = "COMPACT TABLE"  # the latest-value table's small files rewritten, no row changed
RECONCILE = "RECONCILE"  # values of keys the topic erased while the mirror could not see it
REBUILD_TABLE = "REBUILD TABLE"  # the latest-value table made again from the log
MOVED_KEYS = "ERASE MOVED KEYS"  # values whose key's tombstone is in another partition
CAUGHT_UP = "CAUGHT UP"  # only the time the log last held all the broker had moved
RECORD_HISTORY = "RECORD HISTORY"  # minutes of a topic's figures appended to L/T/history
PRUNE_HISTORY = "PRUNE HISTORY"  # history older than history.retention.ms removed
PRUNE_LEDGER = "PRUNE LEDGER"  # erasures finished longer ago than the ledger's retention removed


def properties(operation: str, summary: str, txns: Iterable[Transaction] = (),
               extra: Mapping[str, str] | None = None) -> CommitProperties:
    """Commit properties naming the operation, with the positions that move in it."""
    return CommitProperties(
        app_transactions=list(txns) or None,
        custom_metadata={OPERATION_KEY: operation, "userMetadata": f"compactor: {summary}",
                         **(extra or {})})
