"""A micro-batch's log commit written as one Delta commit file, at a cost flat in the log's size.

delta-rs 1.x commits from a snapshot of every live file: bringing a loaded table to the
latest version rebuilds that snapshot (0.2-0.3 s on a log of 100,000 files, this project's
2-core machine) and the commit rebuilds it again, so the ingest commit alone grew from 0.03 s
on an empty log to 0.74 s there. The Delta protocol asks less of a writer: a commit is the
file ``_delta_log/<version>.json``, created only if no writer created it first, after the
writer has checked what its actions could conflict with. An ingest commit appends new files
and moves its own partitions' ingest positions, so its conflicts are: another writer moved
one of those positions, a newer run claimed the log (the writer generation), or the table's
metadata or protocol changed. The log's :class:`~compactor.lake.log_state.LogFollower`
knows all of them from the commit files it reads anyway.

Protocol of :meth:`LogFollower.append` (under the follower's lock, itself taken under the
run's commit lock):

1. Advance the follower to the latest version V, reading only the commit files written since
   its last look (a full read at start or when the table was replaced).
2. Give up, so that the caller commits through delta-rs, when the table's protocol is one
   this writer does not implement (writer version above 2: table features) or the log is not
   on a local disk (put-if-absent on object storage needs the store's conditional put,
   which delta-rs configures per store).
3. Run the caller's check against the positions at V: the writer generation and each
   partition's ingest position. A failed check raises; nothing is written.
4. Write the actions (``commitInfo``, ``txn``, ``add``) to a temporary file in ``_delta_log``
   and hard-link it to ``<V+1>.json``. The link fails when that name exists, so of two
   writers of V+1 exactly one wins, as with delta-rs's own commit on a local disk. The
   temporary file is removed either way. A reader never sees a partial commit file: the name
   appears only once its content is written and synced.
5. Another writer won V+1: go back to 1 (at most ``_ATTEMPTS`` times).
6. When V+1 is a multiple of ``delta.checkpointInterval``, write the checkpoint and delete
   commit files older than ``delta.logRetentionDuration``, as delta-rs does after its own
   commits: the one step that reads every live file, once per interval, not per batch. It
   failing fails no commit (the next one due retries it; a reader only replays more JSON).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote

import pyarrow as pa
from deltalake import Transaction

from compactor import __version__
from compactor.lake import operations
from compactor.lake.datafiles import WrittenFile, add_action

if TYPE_CHECKING:
    from compactor.lake.log_state import LogFollower

# What a check reads: an app transaction's version at the version being committed on.
Positions = Callable[[str], "int | None"]
Check = Callable[[Positions], None]

_ATTEMPTS = 5


def commit_lines(files: Iterable[WrittenFile], txns: Iterable[Transaction], operation: str,
                 summary: str, partition_by: list[str], now_ms: int) -> list[str]:
    """The JSON lines of an append commit, in the fields and order delta-rs writes them."""
    info = {
        "timestamp": now_ms, "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(partition_by)},
        "isBlindAppend": True,
        "engineInfo": f"kafka-lake-compactor {__version__}",
        "clientVersion": f"kafka-lake-compactor-{__version__}",
        operations.OPERATION_KEY: operation, "userMetadata": f"compactor: {summary}",
    }
    lines = [json.dumps({"commitInfo": info}, separators=(",", ":"))]
    for f in files:
        lines.append(json.dumps({"add": {
            "path": quote(f.path, safe="/="), "partitionValues": dict(f.partition_values),
            "size": f.size,
            "modificationTime": f.modified_ms if f.modified_ms is not None else now_ms,
            "dataChange": True, "stats": f.stats,
        }}, separators=(",", ":")))
    for t in txns:
        txn: dict[str, object] = {"appId": t.app_id, "version": t.version}
        if t.last_updated is not None:
            txn["lastUpdated"] = t.last_updated
        lines.append(json.dumps({"txn": txn}, separators=(",", ":")))
    return lines


def put_if_absent(log_dir: str, version: int, lines: list[str]) -> bool:
    """Step 4: create ``<version>.json`` in the local ``log_dir`` unless it exists; False when
    another writer created it first. Raises OSError when the disk refuses."""
    target = os.path.join(log_dir, f"{version:020d}.json")
    temporary = os.path.join(log_dir, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, target)
    except FileExistsError:
        return False
    finally:
        os.unlink(temporary)
    return True


def append(follower: LogFollower, files: list[WrittenFile], txns: list[Transaction],
           operation: str, summary: str, check: Check, schema: pa.Schema,
           partition_by: list[str], now_ms: int) -> int | None:
    """Commit ``files`` with ``txns`` to the follower's log once ``check`` passes; the version
    committed (None when delta-rs committed it: it does not say which).

    The commit file is written by :meth:`LogFollower.append` where it can be (see the module
    docstring); otherwise delta-rs commits from the follower's table, after the same check.
    """
    lines = commit_lines(files, txns, operation, summary, partition_by, now_ms)
    version = follower.append(lines, check)
    if version is not None:
        return version
    table = follower.table_for_commit()
    check(follower.position)
    table.create_write_transaction(
        [add_action(f, now_ms) for f in files], "append", schema, partition_by=partition_by,
        commit_properties=operations.properties(operation, summary, txns))
    return None

