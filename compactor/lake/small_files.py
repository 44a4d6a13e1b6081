"""Small files of a table that only grows by appends, rewritten as few (Delta OPTIMIZE).

The erasure ledger gains a file with each micro-batch that carries tombstones, and the
latest-value table with each MERGE that only inserts (a MERGE rewrites the files it updates
or deletes in, but adds a file for new keys and touches no other). Every read of the ledger
and every MERGE opens all of a table's files, so without compaction their cost grows with the
run's age. The rewrite is delta-rs's OPTIMIZE compaction: rows unchanged, ``dataChange=false``
(readers and the change data feed see no change). Only files under half the target count
toward the trigger, and delta-rs leaves files of the target's size or more alone, so a
compaction rewrites the small files and the few files short of the target it packs them with,
not the whole table. The replaced files stay on disk until vacuum deletes them.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from compactor.lake import operations


def compact_small_files(table: DeltaTable, target_bytes: int, at_files: int, operation: str,
                        summary: str) -> int:
    """Rewrite ``table``'s files as files of up to ``target_bytes`` once it holds
    ``at_files`` files under half that size; returns how many files it replaced (0: not due).
    Raises delta-rs's errors."""
    sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes")
    small = pc.sum(pc.less(sizes, target_bytes // 2), min_count=0).as_py()
    if small < at_files:
        return 0
    metrics = table.optimize.compact(
        target_size=target_bytes,
        commit_properties=operations.properties(operation, summary))
    return int(metrics.get("numFilesRemoved", 0))
