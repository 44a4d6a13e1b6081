"""Physical deletion of files the log no longer references.

Files removed by cleaning and retention stay on disk for readers of older snapshots for
``vacuum.grace.ms``, recorded in each table as ``delta.deletedFileRetentionDuration`` so that
any Delta tool vacuuming the table honours the same grace. Files no commit ever referenced
(a pass or batch that died before committing) are deleted once they are
``ORPHAN_AGE_HOURS`` (or the grace, if longer) old: younger ones may belong to a commit still
being prepared. A running service, which knows when none of its commits is being prepared,
also deletes orphans of erasure-deadline topics once they pass the grace. A change data feed's
files (``_change_data``, which no remove action ever names) are deleted once they are older
than the grace, as Delta's own VACUUM treats them: the feed reaches back the grace, and the
values in it leave on the same schedule as any removed file's.
"""

from __future__ import annotations

import logging
import os
import time

import pyarrow.fs as pafs
from deltalake import DeltaTable

from compactor.exceptions import LakeError
from compactor.lake.layout import (
    CHANGE_DATA_DIR,
    LOG_HYGIENE,
    LOG_RETENTION_FLOOR_MS,
    update_properties,
)
from compactor.lake.storage import Storage, failure, is_local, local_path

log = logging.getLogger(__name__)

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
ORPHAN_AGE_HOURS = 1
# Past the exact instant: Delta compares with "<", and clocks are read in whole ms.
_VACUUM_SLACK_MS = 50


def retention_interval(grace_ms: int) -> str:
    """The table property value for a grace period, exact to the millisecond.

    Exact, because the service wakes to vacuum at removal + grace (:func:`vacuum_due_ms`):
    a retention rounded up to whole seconds made that wake-up find nothing to delete, and the
    files then waited for the next pass, past the erasure deadline. Delta (delta-rs,
    delta-spark) parses ``interval N milliseconds``; whole seconds keep the shorter form.
    """
    grace_ms = max(0, grace_ms)
    if grace_ms and grace_ms % 1000 == 0:
        return f"interval {grace_ms // 1000} seconds"
    return f"interval {grace_ms} milliseconds"


def vacuum_due_ms(removed_ms: int, grace_ms: int) -> int:
    """When a file removed at ``removed_ms`` (its remove action's deletionTimestamp) can be
    vacuumed: Delta deletes it once deletionTimestamp < now - retention, and the table's
    retention is exactly the grace (:func:`retention_interval`)."""
    return removed_ms + max(0, grace_ms) + _VACUUM_SLACK_MS


def ensure_properties(table: DeltaTable, grace_ms: int) -> None:
    """Record the grace and the log hygiene (:data:`compactor.lake.layout.LOG_HYGIENE`, with a
    log retention of the grace, at least ``LOG_RETENTION_FLOOR_MS``) where the table says
    otherwise: tables created before a setting existed, or a grace that changed."""
    wanted = {**LOG_HYGIENE, RETENTION_PROPERTY: retention_interval(grace_ms),
              "delta.logRetentionDuration": retention_interval(
                  max(grace_ms, LOG_RETENTION_FLOOR_MS))}
    update_properties(table, wanted, "retention of removed files and commit files")


def remove_empty_dirs(root: str, deleted: list[str]) -> int:
    """Remove the local directories (segments, partitions) that ``deleted`` left empty; never
    the table's root or its ``_delta_log``. Returns how many were removed."""
    base = os.path.realpath(local_path(root))
    removed = 0
    for parent in sorted({os.path.dirname(f) for f in deleted if "/" in f}, reverse=True):
        path = os.path.realpath(os.path.join(base, parent))
        while path.startswith(base + os.sep) and "_delta_log" not in path:
            try:
                os.rmdir(path)  # refuses a directory that holds anything
            except OSError:
                break
            removed += 1
            path = os.path.dirname(path)
    return removed


class Vacuum:
    """Runs lite vacuum every time and full (orphan) vacuum at most once an hour per table."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._last_full: dict[str, float] = {}

    def _existing(self, table: DeltaTable, path: str, full: bool) -> list[str]:
        """What vacuum would delete; delta-rs lists files again after deleting them, so only
        those still stored count."""
        listed = table.vacuum(dry_run=True, full=full, enforce_retention_duration=True)
        if not listed:
            return []
        fs, root = self._storage.filesystem(path)
        infos = fs.get_file_info([f"{root.rstrip('/')}/{f}" for f in listed])
        return [f for f, info in zip(listed, infos, strict=True)
                if info.type != pafs.FileType.NotFound]

    def expired_commits(self, path: str) -> None:
        """Delete the table's commit files past its log retention that a checkpoint covers
        (the caller holds the commit lock: no other cleanup runs beside it)."""
        try:
            self._storage.table(path).cleanup_metadata()
        except Exception as exc:
            raise LakeError(f"removing expired commit files of {path} failed: "
                            f"{failure(path, exc)}") from exc

    def change_data(self, path: str, grace_ms: int, now_ms: int | None = None) -> list[str]:
        """Delete the table's change data files written more than ``grace_ms`` ago; their
        paths."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        try:
            fs, root = self._storage.filesystem(f"{path.rstrip('/')}/{CHANGE_DATA_DIR}")
            if fs.get_file_info(root).type == pafs.FileType.NotFound:
                return []
            old = [i.path for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
                   if i.type == pafs.FileType.File
                   and (i.mtime_ns or 0) // 1_000_000 + grace_ms + _VACUUM_SLACK_MS < now]
            for f in old:
                fs.delete_file(f)
        except Exception as exc:
            raise LakeError(f"vacuum of the change data of {path} failed: "
                            f"{failure(path, exc)}") from exc
        if old:
            log.info("vacuum %s: deleted %d change data files", path, len(old))
        return old

    def run(self, path: str, grace_ms: int, dry_run: bool = False,
            orphans_past_grace: bool = False, tidy: bool = False) -> list[str]:
        """Delete removed files past the grace (and old orphans); returns their paths.

        ``orphans_past_grace``: also delete orphans older than the grace now. Only safe when
        the caller knows that no commit of any writer to this table is being prepared (its
        files would look like orphans); the service knows it for itself between micro-batches.
        ``tidy``: also remove the local directories the deleted files left empty (the same
        condition: a writer in flight could be about to write into one).
        """
        orphan_hours = max(ORPHAN_AGE_HOURS, -(-grace_ms // 3_600_000))
        try:
            table = self._storage.table(path)
            deleted = self._existing(table, path, full=False)
            if deleted and not dry_run:
                table.vacuum(dry_run=False, enforce_retention_duration=True)
            now = time.monotonic()
            if orphans_past_grace and not dry_run:
                # full=True with the table's own retention (the grace, in seconds).
                orphans = self._existing(table, path, full=True)
                if orphans:
                    table.vacuum(dry_run=False, full=True, enforce_retention_duration=True)
                    deleted += [f for f in orphans if f not in deleted]
            last_full = self._last_full.get(path)
            if not dry_run and (last_full is None or now - last_full >= 3600):
                deleted += table.vacuum(
                    retention_hours=orphan_hours, dry_run=False, full=True,
                    enforce_retention_duration=False,
                )
                self._last_full[path] = now
        except Exception as exc:
            raise LakeError(f"vacuum of {path} failed: {failure(path, exc)}") from exc
        if deleted:
            log.info("vacuum %s: deleted %d files", path, len(deleted))
            if tidy and is_local(path):
                remove_empty_dirs(path, deleted)
        return deleted
