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
log's :class:`~compactor.lake.log_follower.LogFollower` knows all of them from the commit files it
reads anyway.

Each commit is carried out by :meth:`~compactor.lake.log_follower.LogFollower.append`, whose
module writes its protocol down; this one builds the commit's actions and falls back to
delta-rs where that protocol does not apply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any
from urllib.parse import quote

import pyarrow as pa
from deltalake import Transaction
from deltalake.transaction import AddAction, RemoveAction

from compactor.exceptions import LakeError
from compactor.lake import commit_files, operations
from compactor.lake.datafiles import WrittenFile, add_action
from compactor.lake.layout import join
from compactor.lake.log_follower import LogFollower
from compactor.lake.segments import DataFile, data_file
from compactor.lake.storage import is_local, local_path

# What a check reads: an app transaction's version at the version being committed on.
Positions = Callable[[str], "int | None"]
Check = Callable[[Positions], None]

try:
    _ENGINE = f"kafka-lake-compactor-{metadata.version('kafka-lake-compactor')}"
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    _ENGINE = "kafka-lake-compactor"


# What quote() leaves as it is with safe="/=": the log's own file names are all of it.
_UNQUOTED = re.compile(r"[A-Za-z0-9_.~/=-]*")


def _path(relative: str) -> str:
    return relative if _UNQUOTED.fullmatch(relative) else quote(relative, safe="/=")


def commit_actions(adds: Sequence[WrittenFile], txns: Sequence[Transaction], operation: str,
                   summary: str, partition_by: list[str], now_ms: int,
                   removes: Sequence[tuple[DataFile, bool]] = (),
                   moved: Sequence[WrittenFile] = ()) -> list[dict[str, Any]]:
    """The actions of a commit, in the fields delta-rs writes: ``removes`` (file, whether
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
    return actions


def commit_lines(actions: Sequence[dict[str, Any]]) -> list[str]:
    """The JSON lines of a commit's actions, as ``json.dumps`` writes them compactly."""
    return [_add_line(a["add"]) if "add" in a else _txn_line(a["txn"]) if "txn" in a
            else json.dumps(a, separators=(",", ":")) for a in actions]


def _txn_line(txn: dict[str, Any]) -> str:
    """A txn action of :func:`commit_actions` as ``json.dumps`` writes it, formatted
    directly: a micro-batch's commit holds one per partition it read."""
    updated = txn.get("lastUpdated")
    return (f'{{"txn":{{"appId":{_json_string(txn["appId"])},"version":{int(txn["version"])}'
            + ("" if updated is None else f',"lastUpdated":{int(updated)}') + "}}")


def _add_line(add: dict[str, Any]) -> str:
    """An add action of :func:`commit_actions` as ``json.dumps`` writes it, formatted
    directly: a micro-batch's commit holds one per partition with records."""
    values = ",".join(f"{_json_string(k)}:{_json_string(v)}"
                      for k, v in add["partitionValues"].items())
    return (f'{{"add":{{"path":{_json_string(add["path"])},"partitionValues":{{{values}}},'
            f'"size":{int(add["size"])},"modificationTime":{int(add["modificationTime"])},'
            f'"dataChange":{"true" if add["dataChange"] else "false"},'
            f'"stats":{_json_string(add["stats"])}}}}}')


def _known_files(adds: Sequence[WrittenFile], now_ms: int) -> dict[str, DataFile]:
    """The files of the add actions whose writer kept their span, by the path their action
    names: the follower takes them as they are, instead of parsing their statistics."""
    known = {}
    for w in adds:
        if w.span is not None:
            first, last, oldest, newest, horizon = w.span
            values = w.partition_values
            known[_path(w.path)] = data_file(
                w.path, w.size, int(values["partition"]), int(values["segment"]), first, last,
                w.records, oldest, newest, horizon,
                w.modified_ms if w.modified_ms is not None else now_ms, w.record_bytes)
    return known


@dataclass(frozen=True)
class Staged:
    """A commit's actions and their lines, written to a temporary file in the log's
    ``_delta_log``, not yet synced (:func:`stage`): :func:`~compactor.lake.commit_files.sync_files`
    them, then :func:`append` links the file under the next version; the stager removes it
    after."""

    actions: list[dict[str, Any]]
    lines: list[str]
    path: str


def stage(follower: LogFollower, adds: Sequence[WrittenFile], txns: Sequence[Transaction],
          operation: str, summary: str, partition_by: list[str], now_ms: int) -> Staged | None:
    """The commit :func:`append` would write, written ahead to a temporary file so that the
    commits of several logs are synced together; None where the log is not on a local disk.
    Raises LakeError when the disk refuses."""
    if not is_local(follower.uri):
        return None
    actions = commit_actions(adds, txns, operation, summary, partition_by, now_ms)
    lines = commit_lines(actions)
    log_dir = join(local_path(follower.uri), "_delta_log")
    try:
        return Staged(actions, lines, commit_files.stage(log_dir, lines, sync=False))
    except OSError as exc:
        raise LakeError(f"cannot write a commit of the Delta log {follower.uri}: {exc}") \
            from exc


def append(follower: LogFollower, adds: Sequence[WrittenFile], txns: Sequence[Transaction],
           operation: str, summary: str, check: Check, schema: pa.Schema,
           partition_by: list[str], now_ms: int, removes: Sequence[tuple[DataFile, bool]] = (),
           moved: Sequence[WrittenFile] = (), staged: Staged | None = None) -> int | None:
    """Commit to the follower's log once ``check`` passes and every file of ``removes`` is
    live; the version committed (None when delta-rs committed it: it does not say which).
    ``staged``: this commit from :func:`stage` (same adds, txns and summary), synced.

    The commit file is written by :meth:`LogFollower.append` where it can be (see the module
    docstring); otherwise delta-rs commits from the follower's table, after the same checks.
    """
    actions = staged.actions if staged is not None else commit_actions(
        adds, txns, operation, summary, partition_by, now_ms, removes, moved)
    lines = staged.lines if staged is not None else commit_lines(actions)
    removed = [f.path for f, _ in removes]
    known = _known_files([*adds, *moved], now_ms) if is_local(follower.uri) else None
    version = follower.append(lines, check, removed,
                              staged.path if staged is not None else None, actions, known)
    if version is not None:
        return version
    table = follower.table_for_commit()
    check(follower.position)
    follower.check_live(removed)
    changes: list[AddAction | RemoveAction] = [
        RemoveAction(f.path, data_change, now_ms, f.size_bytes,
                     {"partition": str(f.partition), "segment": str(f.segment)})
        for f, data_change in removes]
    changes += [add_action(f, now_ms) for f in adds]
    changes += [add_action(f, now_ms, data_change=False) for f in moved]
    table.create_write_transaction(
        changes, "append", schema, partition_by=partition_by,
        commit_properties=operations.properties(operation, summary, txns))
    return None
