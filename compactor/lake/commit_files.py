"""A Delta log's commit files read directly, for the followers that advance from new commits.

delta-rs opens a table by replaying its last checkpoint and every commit since; a process that
looks at the same table again and again (the log follower of :mod:`compactor.lake.log_state`,
the erasure backlog of :mod:`compactor.erasure.backlog`) instead reads the commit files written
after the version it knows, ``_delta_log/<version>.json``, one JSON action per line.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from compactor.exceptions import LakeError
from compactor.lake.layout import join
from compactor.lake.storage import Storage


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


def check_not_overtaken(uri: str, storage: Storage, version: int) -> None:
    """Raise :class:`Overtaken` when the next commit after ``version`` is missing because the
    log moved past it: ``_last_checkpoint`` names a later version (log cleanup removed commits
    never read), or ``version``'s own commit file is gone while no checkpoint covers it (the
    table was deleted and recreated)."""
    checkpoint = read_log_file(uri, storage, "_last_checkpoint")
    last = int(json.loads(checkpoint)["version"]) if checkpoint else None
    if last is not None and last > version:
        raise Overtaken
    if (last is None or last < version) and version >= 0 \
            and read_log_file(uri, storage, f"{version:020d}.json") is None:
        raise Overtaken
