"""The log's commits written as one Delta commit file each, at a cost flat in the log's size.

delta-rs 1.x commits from a snapshot of every live file: bringing a loaded table to the latest
version rebuilds that snapshot and the commit rebuilds it again, so a commit's cost grew with the
number of live files (bench/README.md, "Why the code's settings"). The Delta protocol asks less of
a writer: a commit is the file ``_delta_log/<version>.json``, created only if no writer created it
first, after the writer has checked what its actions could conflict with. Our commits to the log
move the app transactions that guard what they touch (an ingest commit its partitions' ingest
positions, a cleaning commit the partition's cleaner checkpoint and rewrite fence), so their
conflicts are: another writer moved one of those positions, a newer run claimed the log (the writer
generation), a file to remove is no longer live, or the table's metadata or protocol changed. The
log's :class:`~compactor.lake.log_state.LogFollower` knows all of them from the commit files it
reads anyway.

Protocol of :meth:`LogFollower.append` (under the follower's lock, itself taken under the
run's commit lock):

1. Advance the follower to the latest version V, reading only the commit files written since
   its last look (a full read at start or when the table was replaced).
2. Give up, so that the caller commits through delta-rs, when the table's protocol is one
   this writer does not implement (writer version above 2: table features) or the log is not
   on a local disk (put-if-absent on object storage needs the store's conditional put,
   which delta-rs configures per store).
3. Run the caller's check against the positions at V (the writer generation, each position
   the commit moves) and make sure every file to remove is live at V. A failed check raises
   (:class:`Conflict` when another writer got there first); nothing is written.
4. Write the actions (``commitInfo``, ``remove``, ``add``, ``txn``) to a temporary file in
   ``_delta_log`` and hard-link it to ``<V+1>.json``. The link fails when that name exists,
   so of two writers of V+1 exactly one wins, as with delta-rs's own commit on a local
   disk. The temporary file is removed either way. A reader never sees a partial commit
   file: the name appears only once its content is written and synced.
5. Another writer won V+1: go back to 1 (at most five times).
6. When V+1 is a multiple of ``delta.checkpointInterval``, write the checkpoint and delete
   commit files older than ``delta.logRetentionDuration``, as delta-rs does after its own
   commits: the one step that reads every live file, once per interval, not per batch. It
   failing fails no commit (the next one due retries it; a reader only replays more JSON).
   Temporary files of step 4 older than an hour are deleted then too: a writer that died
   between writing and linking one left it behind (delta-rs ignores them; no live writer
   holds one for more than the seconds a write and a link take).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING
from urllib.parse import quote

import pyarrow as pa
from deltalake import Transaction
from deltalake.transaction import AddAction, RemoveAction

from compactor.exceptions import LakeError
from compactor.lake import operations
from compactor.lake.datafiles import WrittenFile, add_action
from compactor.lake.segments import DataFile

if TYPE_CHECKING:
    from compactor.lake.log_state import LogFollower

# What a check reads: an app transaction's version at the version being committed on.
Positions = Callable[[str], "int | None"]
Check = Callable[[Positions], None]

try:
    _ENGINE = f"kafka-lake-compactor-{metadata.version('kafka-lake-compactor')}"
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    _ENGINE = "kafka-lake-compactor"


class Conflict(LakeError):
    """Another writer moved what this commit checked: nothing was committed."""


def _path(relative: str) -> str:
    return quote(relative, safe="/=")


def commit_lines(adds: Sequence[WrittenFile], txns: Sequence[Transaction], operation: str,
                 summary: str, partition_by: list[str], now_ms: int,
                 removes: Sequence[tuple[DataFile, bool]] = (),
                 moved: Sequence[WrittenFile] = ()) -> list[str]:
    """The JSON lines of a commit, in the fields delta-rs writes: ``removes`` (file, whether
    records go with it), ``adds``, ``moved`` (added with no data change), ``txns``."""
    info = {
        "timestamp": now_ms, "operation": "WRITE",
        "operationParameters": {"mode": "Append", "partitionBy": json.dumps(partition_by)},
        "isBlindAppend": not removes,
        "engineInfo": _ENGINE, "clientVersion": _ENGINE,
        operations.OPERATION_KEY: operation, "userMetadata": f"compactor: {summary}",
    }
    actions: list[dict[str, object]] = [{"commitInfo": info}]
    for f, data_change in removes:
        actions.append({"remove": {
            "path": _path(f.path), "deletionTimestamp": now_ms, "dataChange": data_change,
            "extendedFileMetadata": True, "size": f.size_bytes,
            "partitionValues": {"partition": str(f.partition), "segment": str(f.segment)},
        }})
    for files, data_change in ((adds, True), (moved, False)):
        for w in files:
            actions.append({"add": {
                "path": _path(w.path), "partitionValues": dict(w.partition_values),
                "size": w.size,
                "modificationTime": w.modified_ms if w.modified_ms is not None else now_ms,
                "dataChange": data_change, "stats": w.stats,
            }})
    for t in txns:
        txn: dict[str, object] = {"appId": t.app_id, "version": t.version}
        if t.last_updated is not None:
            txn["lastUpdated"] = t.last_updated
        actions.append({"txn": txn})
    return [json.dumps(a, separators=(",", ":")) for a in actions]


STALE_TEMPORARY_S = 3600.0


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp") and ".json." in name


def remove_stale_temporaries(log_dir: str, now_s: float,
                             older_than_s: float = STALE_TEMPORARY_S) -> list[str]:
    """Step 6's sweep: delete the temporary commit files in the local ``log_dir`` last
    modified more than ``older_than_s`` before ``now_s``; their names."""
    removed = []
    with os.scandir(log_dir) as entries:
        for entry in entries:
            if not _is_temporary(entry.name):
                continue
            try:
                if entry.stat().st_mtime < now_s - older_than_s:
                    os.unlink(entry.path)
                    removed.append(entry.name)
            except FileNotFoundError:  # its writer (or another sweep) removed it meanwhile
                continue
    return sorted(removed)


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


def append(follower: LogFollower, adds: Sequence[WrittenFile], txns: Sequence[Transaction],
           operation: str, summary: str, check: Check, schema: pa.Schema,
           partition_by: list[str], now_ms: int, removes: Sequence[tuple[DataFile, bool]] = (),
           moved: Sequence[WrittenFile] = ()) -> int | None:
    """Commit to the follower's log once ``check`` passes and every file of ``removes`` is
    live; the version committed (None when delta-rs committed it: it does not say which).

    The commit file is written by :meth:`LogFollower.append` where it can be (see the module
    docstring); otherwise delta-rs commits from the follower's table, after the same checks.
    """
    lines = commit_lines(adds, txns, operation, summary, partition_by, now_ms, removes, moved)
    removed = [f.path for f, _ in removes]
    version = follower.append(lines, check, removed)
    if version is not None:
        return version
    table = follower.table_for_commit()
    check(follower.position)
    follower.check_live(removed)
    actions: list[AddAction | RemoveAction] = [
        RemoveAction(f.path, data_change, now_ms, f.size_bytes,
                     {"partition": str(f.partition), "segment": str(f.segment)})
        for f, data_change in removes]
    actions += [add_action(f, now_ms) for f in adds]
    actions += [add_action(f, now_ms, data_change=False) for f in moved]
    table.create_write_transaction(
        actions, "append", schema, partition_by=partition_by,
        commit_properties=operations.properties(operation, summary, txns))
    return None
