"""A Delta log's commit files, read and written directly.

Reading: for the followers that advance from new commits. Writing: a commit file created only
if no writer created it first (step 4 of :meth:`compactor.lake.log_follower.LogFollower.append`).

delta-rs opens a table by replaying its last checkpoint and every commit since; a process that
looks at the same table again and again (the log follower of :mod:`compactor.lake.log_follower`,
the erasure backlog of :mod:`compactor.erasure.backlog`) instead reads the commit files written
after the version it knows, ``_delta_log/<version>.json``, one JSON action per line.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from compactor.exceptions import LakeError
from compactor.lake.layout import join
from compactor.lake.storage import Storage

# Staged commit files synced at once (sync_files); the pool is made at its first use.
_SYNC_THREADS = 8
_syncer: ThreadPoolExecutor | None = None
_syncer_lock = threading.Lock()


class Overtaken(Exception):
    """The followed table is not the one loaded, or the follower fell behind its log cleanup:
    start over from a full read."""


def read_log_file(uri: str, storage: Storage, name: str) -> str | None:
    """``_delta_log/<name>`` of the table at ``uri``; None when it does not exist."""
    fs, path = storage.filesystem(join(uri, "_delta_log", name))
    try:
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(path) as stream:
            data: bytes = stream.read()
            return data.decode()
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowException, UnicodeDecodeError) as exc:
        raise LakeError(f"cannot read {name} of the Delta log {uri}: {exc}") from exc


def read_commit(uri: str, storage: Storage, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit ``version``, in order; None when it is not written (yet)."""
    text = read_log_file(uri, storage, f"{version:020d}.json")
    if text is None:
        return None
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise LakeError(f"commit {version} of the Delta log {uri} is not JSON lines: "
                        f"{exc}") from exc


def is_newest(uri: str, storage: Storage, version: int) -> bool:
    """Whether ``version`` is the table's newest: its commit file is there (log cleanup
    removes the oldest first) and the next one is not. Two file lookups, no log replay."""
    def there(v: int) -> bool:
        fs, path = storage.filesystem(join(uri, "_delta_log", f"{v:020d}.json"))
        try:
            return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"cannot read the Delta log of {uri}: {exc}") from exc

    return there(version) and not there(version + 1)


def _file_info(uri: str, storage: Storage, name: str) -> pafs.FileInfo:
    """``_delta_log/<name>``'s file information (its type NotFound when missing)."""
    fs, path = storage.filesystem(join(uri, "_delta_log", name))
    try:
        return fs.get_file_info(path)
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"cannot look up {name} of the Delta log {uri}: {exc}") from exc


class OvertakenCheck:
    """Called with the version a follower knows when the next commit file is missing:
    raises :class:`Overtaken` when that is because the log moved past it (``_last_checkpoint``
    names a later version: log cleanup removed commits never read), or the version's own
    commit file is gone while no checkpoint covers it (the table was deleted and recreated).

    One per followed table, which finds no new commit most times it looks:
    ``_last_checkpoint`` is read again only when its modification time or size changed, and
    the known version's commit file is only looked up."""

    def __init__(self, uri: str, storage: Storage) -> None:
        self.uri = uri
        self._storage = storage
        self._stamp: tuple[int, int] | None = None  # _last_checkpoint's (mtime ns, size)
        self._last: int | None = None

    def __call__(self, version: int) -> None:
        info = _file_info(self.uri, self._storage, "_last_checkpoint")
        if info.type == pafs.FileType.NotFound:
            self._stamp, last = None, None
        else:
            stamp = (info.mtime_ns, info.size) if info.mtime_ns is not None else None
            if stamp is None or stamp != self._stamp:
                text = read_log_file(self.uri, self._storage, "_last_checkpoint")
                self._last = int(json.loads(text)["version"]) if text else None
                self._stamp = stamp if text else None
            last = self._last
        if last is not None and last > version:
            raise Overtaken
        if (last is None or last < version) and version >= 0 and _file_info(
                self.uri, self._storage, f"{version:020d}.json").type == pafs.FileType.NotFound:
            raise Overtaken


class Conflict(LakeError):
    """Another writer moved what this commit checked: nothing was committed."""


STALE_TEMPORARY_S = 3600.0


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp") and ".json." in name


def remove_stale_temporaries(log_dir: str, now_s: float,
                             older_than_s: float = STALE_TEMPORARY_S) -> list[str]:
    """Delete the temporary commit files in the local ``log_dir`` last
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
    """Create ``<version>.json`` in the local ``log_dir`` unless it exists; False when
    another writer created it first. Raises OSError when the disk refuses."""
    temporary = stage(log_dir, lines, sync=True)
    try:
        return link(log_dir, version, temporary)
    finally:
        os.unlink(temporary)


def stage(log_dir: str, lines: list[str], sync: bool) -> str:
    """Write a commit's ``lines`` to a new temporary file in the local ``log_dir``; its path.
    ``sync``: make it durable now; otherwise the caller must :func:`sync_files` it before it
    is linked (several commits' files synced together share one journal commit)."""
    temporary = os.path.join(log_dir, f".commit.json.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
        out.flush()
        if sync:
            os.fsync(out.fileno())
    return temporary


def sync_files(paths: list[str]) -> None:
    """Make the staged files durable, several at once: on a journaling file system syncs that
    overlap wait for the same journal commit instead of one commit after another."""
    if len(paths) <= 1:
        for path in paths:
            _sync(path)
        return
    global _syncer
    with _syncer_lock:
        if _syncer is None:
            _syncer = ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="commit-sync")
    list(_syncer.map(_sync, paths))  # the first failure raises here


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def link(log_dir: str, version: int, temporary: str) -> bool:
    """Give the durable temporary commit file the name ``<version>.json`` unless that exists
    (False: another writer created it first); the temporary name stays for the caller."""
    try:
        os.link(temporary, os.path.join(log_dir, f"{version:020d}.json"))
    except FileExistsError:
        return False
    return True
