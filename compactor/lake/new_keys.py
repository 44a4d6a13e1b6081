"""A catch-up whose keys the latest-value table does not hold yet, appended instead of merged.

Many topics are keyed by new identifiers (orders, events, sessions): most catch-ups of their
tables only insert. A MERGE costs a join planned and run over the whole table whatever it
changes, so such a catch-up is written as a plain append of the range's values when none of
its keys is in the table, which is what the MERGE would have done (step 4 of
:mod:`compactor.lake.latest_table`): a key the table does not hold is inserted when its newest
record is a value, and a tombstone of such a key has nothing to delete. The append carries
the same app transactions as the MERGE, so it moves the same positions in the same commit.

The table is read at one version and the append commits against it: delta-rs refuses the
commit when another one since moved any of the same ``compactor-table-<partition>`` positions
or removed files (a rebuild's reset, another catch-up), so a key inserted meanwhile is never
inserted twice. A change data feed reads an append as inserts, as it reads Spark's own.

A topic whose records update keys would pay the key read beside every MERGE; after a read
finds a held key, the table's next :data:`MERGES_WITHOUT_LOOKING` catch-ups in this process
MERGE without reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties

from compactor.lake.storage import Storage

# A table whose catch-ups update keys has its keys read once in this many catch-ups plus one.
MERGES_WITHOUT_LOOKING = 8
_merging: dict[str, int] = {}  # table path -> catch-ups left that MERGE without reading keys


def appendable(table: DeltaTable, keys: pa.Array | pa.ChunkedArray, path: str,
               storage: Storage) -> bool:
    """Whether a catch-up of ``keys`` may append to the table at ``path``: it holds none of
    them (:func:`holds_any`), asked unless a recent catch-up of the table found a held key.
    The caller holds the table's commit lock. Raises pyarrow's and delta-rs's errors."""
    left = _merging.get(path, 0)
    if left > 0:
        _merging[path] = left - 1
        return False
    if holds_any(table, keys, storage):
        _merging[path] = MERGES_WITHOUT_LOOKING
        return False
    return True


def holds_any(table: DeltaTable, keys: pa.Array | pa.ChunkedArray, storage: Storage) -> bool:
    """Whether a row of ``table`` (at its loaded version) has one of ``keys``; reads the key
    column file by file and stops at the first file that holds one. Raises pyarrow's and
    delta-rs's errors."""
    wanted = keys.cast(pa.binary())
    if isinstance(wanted, pa.ChunkedArray):
        wanted = wanted.combine_chunks()
    if len(wanted) == 0:
        return False
    for uri in table.file_uris():
        fs, where = storage.filesystem(unquote(uri))
        with fs.open_input_file(where) as data:
            column = pq.ParquetFile(data).read(columns=["key"]).column("key")
        if pc.any(pc.is_in(column.cast(pa.binary()), value_set=wanted)).as_py():
            return True
    return False


def append_new(table: DeltaTable, source: pa.Table,
               props: CommitProperties) -> Mapping[str, int]:
    """Append the values of ``source`` (one record per key, none held by the table) in one
    commit with ``props``; the MERGE's metrics of the same change. Raises delta-rs's errors
    (a conflicting commit among them)."""
    values = source.filter(pc.is_valid(source.column("value")))
    write_deltalake(table, values, mode="append", commit_properties=props)
    return {"num_target_rows_inserted": values.num_rows}
