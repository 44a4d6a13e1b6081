"""Every app transaction of a table's snapshot, read at once.

The lake keeps several positions per Kafka partition as app transactions
(:mod:`compactor.positions`), thousands at 1,000 partitions. delta-rs looks one up by walking
the snapshot's app transactions, so reading each position of every partition costs in the
square of the partitions. Here they are read together: the ``txn`` column of the last
checkpoint (``_delta_log/_last_checkpoint`` names it), then the ``txn`` actions of the commits
after it, later ones winning. Where the log is laid out otherwise (a v2 or missing
checkpoint with a long log, a transaction retention that expires positions, a commit file
gone), the answer is None and callers look positions up one by one as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from compactor.exceptions import LakeError
from compactor.lake.commit_files import read_log_file
from compactor.lake.layout import join
from compactor.lake.storage import Storage

# Commits read without a checkpoint before delta-rs's lookups are the cheaper way.
_MAX_COMMITS = 1000
_EXPIRING = "delta.setTransactionRetentionDuration"


def app_transactions(table: DeltaTable, uri: str, storage: Storage) -> dict[str, int] | None:
    """App id -> version of every app transaction in the snapshot ``table`` (opened at
    ``uri``); None when the log cannot be read this way (see the module)."""
    version = table.version()
    if _EXPIRING in table.metadata().configuration:
        return None
    found: dict[str, int] = {}
    start = 0
    text = read_log_file(uri, storage, "_last_checkpoint")
    if text is not None:
        try:
            last = json.loads(text)
            checkpoint, parts = int(last["version"]), last.get("parts")
        except (ValueError, KeyError, TypeError):
            return None
        if "v2Checkpoint" in last or checkpoint > version:
            return None
        names = ([f"{checkpoint:020d}.checkpoint.parquet"] if not parts else
                 [f"{checkpoint:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet"
                  for i in range(1, int(parts) + 1)])
        for name in names:
            fs, path = storage.filesystem(join(uri, "_delta_log", name))
            try:
                column = pq.read_table(path, columns=["txn"], filesystem=fs).column("txn")
            except (OSError, KeyError, pa.ArrowException):
                return None
            for txn in column.drop_null().to_pylist():
                found[txn["appId"]] = int(txn["version"])
        start = checkpoint + 1
    if version - start > _MAX_COMMITS:
        return None
    for v in range(start, version + 1):
        try:
            text = read_log_file(uri, storage, f"{v:020d}.json")
        except LakeError:
            return None
        if text is None:  # removed by log cleanup, or a checkpoint not recorded
            return None
        for line in text.splitlines():
            if '"txn"' not in line[:16]:  # one action per line: parse the app transactions only
                continue
            try:
                txn = json.loads(line)["txn"]
                found[txn["appId"]] = int(txn["version"])
            except (ValueError, KeyError, TypeError):
                return None
    return found


def position_lookup(table: DeltaTable, uri: str,
                    storage: Storage) -> Callable[[str], int | None]:
    """A lookup of ``table``'s app transactions: one read of all of them where the log allows,
    delta-rs's lookup per app id otherwise."""
    found = app_transactions(table, uri, storage)
    return table.transaction_version if found is None else found.get
