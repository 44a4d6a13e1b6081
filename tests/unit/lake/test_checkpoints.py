"""Checkpoints written off the commit path (``compactor run``) are the same checkpoints.

Real Delta tables on disk, read back by delta-rs; no Spark or broker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.lake import checkpoints
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, ensure_table
from compactor.lake.log_follower import LogFollower
from compactor.lake.segments import read_partition_logs
from compactor.lake.storage import LOCAL
from compactor.positions import INGEST
from tests.unit.lake.test_log_commit import _append
from tests.unit.lake.test_log_follower import _file


@pytest.fixture
def background() -> Iterator[None]:
    checkpoints.start()
    try:
        yield
    finally:
        checkpoints.stop()


def test_a_commit_does_not_wait_for_its_checkpoint(background: None) -> None:
    release, written = threading.Event(), threading.Event()

    def slow() -> None:
        release.wait(30)
        written.set()

    checkpoints.write("t", slow)  # returns while the checkpoint waits
    assert not written.is_set()
    release.set()
    assert written.wait(30)


def test_a_newer_request_replaces_a_queued_one_and_stop_writes_what_is_queued() -> None:
    checkpoints.start()
    release = threading.Event()
    done: list[str] = []
    checkpoints.write("blocker", lambda: (release.wait(30), done.append("blocker")))
    checkpoints.write("a", lambda: done.append("a@10"))
    checkpoints.write("b", lambda: done.append("b@10"))
    checkpoints.write("a", lambda: done.append("a@20"))  # a@10 is still queued: replaced
    release.set()
    checkpoints.stop()
    assert done == ["blocker", "b@10", "a@20"]
    checkpoints.write("a", lambda: done.append("a@30"))  # stopped: written at once
    assert done[-1] == "a@30"


def test_a_failed_checkpoint_leaves_the_thread_writing_the_next(background: None) -> None:
    written = threading.Event()

    def broken() -> None:
        raise OSError("disk full")

    checkpoints.write("a", broken)
    checkpoints.write("b", written.set)
    assert written.wait(30)


def test_log_checkpoints_written_in_the_background_are_delta_checkpoints_the_follower_adopts(
        tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    DeltaTable(root).alter.set_table_properties({"delta.checkpointInterval": "5"})
    follower = LogFollower(root, LOCAL)
    checkpoints.start()
    try:
        for offset in range(12):  # versions 2..13: checkpoints due at 5 and 10
            _append(follower, [_file(root, 0, 0, range(offset, offset + 1))],
                    [INGEST.moved_to(offset, 0)])
    finally:
        checkpoints.stop()
    log_dir = Path(root) / "_delta_log"
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 10
    assert follower.base_opened_at == 10 and follower.full_loads == 1
    assert follower.position(INGEST.id(0)) == 11
    table = DeltaTable(root)
    assert table.version() == 13 and INGEST.read(table, 0) == 11
    assert dict(follower.view().partitions) == dict(read_partition_logs(table))
