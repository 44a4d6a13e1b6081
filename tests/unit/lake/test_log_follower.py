"""A log followed commit by commit gives what a full read of the same version gives.

Real Delta tables on disk (delta-rs), no Spark or broker: the follower reads delta-rs's own
commit files, so the comparison is with what delta-rs itself reports.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, RemoveAction, Transaction

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.datafiles import WrittenFile, add_action, write_data_file
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, ensure_table
from compactor.lake.log_follower import LogFollower
from compactor.lake.segments import read_partition_logs
from compactor.lake.storage import LOCAL
from compactor.positions import CLEANER, INGEST, REWRITE

FILE_SCHEMA = pa.schema([*(f for f in KAFKA_SCHEMA if f.name != "partition"),
                         pa.field("deleteHorizonMs", pa.int64())])


def _file(root: str, partition: int, segment: int, offsets: range,
          tombstone: bool = False, horizon: int | None = None) -> WrittenFile:
    now_ms = int(time.time() * 1000)
    n = len(offsets)
    rows = pa.table({
        "key": [b"k%d" % o for o in offsets], "value": [None if tombstone else b"v"] * n,
        "topic": ["t"] * n, "offset": list(offsets),
        "timestamp": [(now_ms - 1000 + o) * 1000 for o in offsets],
        "timestampType": [0] * n, "headers": [[]] * n, "deleteHorizonMs": [horizon] * n,
    }, schema=FILE_SCHEMA)
    return write_data_file(root, f"partition={partition}/segment={segment}", rows, 10 * n,
                           "log", {"partition": str(partition), "segment": str(segment)},
                           storage=LOCAL)


def _commit(root: str, adds: list[WrittenFile], removes: list[WrittenFile] = (),
            txns: list[Transaction] = ()) -> None:
    now_ms = int(time.time() * 1000)
    table = DeltaTable(root)
    actions = [RemoveAction(f.path, True, now_ms, f.size, dict(f.partition_values))
               for f in removes] + [add_action(f, now_ms) for f in adds]
    table.create_write_transaction(actions, "append", LOG_SCHEMA,
                                   partition_by=LOG_PARTITION_COLUMNS,
                                   commit_properties=CommitProperties(app_transactions=txns))


def _same_as_a_full_read(follower: LogFollower, root: str) -> None:
    view = follower.view()
    assert view is not None
    table = DeltaTable(root)
    assert view.version == table.version()
    assert view.table_id == str(table.metadata().id)
    assert dict(view.partitions) == dict(read_partition_logs(table))
    assert view.rewrites == {p: REWRITE.read(table, p) or 0 for p in view.partitions}


def test_adds_removes_and_positions_are_followed_without_a_full_read(tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    first = [_file(root, 0, 0, range(0, 3)), _file(root, 1, 0, range(0, 2))]
    _commit(root, first, txns=[INGEST.moved_to(2, 0), INGEST.moved_to(1, 1)])
    follower = LogFollower(root, LOCAL)
    _same_as_a_full_read(follower, root)

    more = [_file(root, 0, 3, range(3, 5), tombstone=True), _file(root, 1, 0, range(2, 4))]
    _commit(root, more, txns=[INGEST.moved_to(4, 0), INGEST.moved_to(3, 1)])
    _same_as_a_full_read(follower, root)
    cleaned = _file(root, 0, 0, range(1, 3), horizon=int(time.time() * 1000) + 60_000)
    _commit(root, [cleaned], removes=[first[0]],
            txns=[CLEANER.moved_to(3, 0), REWRITE.moved_to(1, 0)])
    _same_as_a_full_read(follower, root)
    _commit(root, [], removes=[first[1], more[1]])  # retention empties partition 1
    view = follower.view()
    assert view is not None and view.partitions[1].segments == ()
    assert view.partitions[1].committed_offset == 3  # its position stays
    assert dict(view.partitions)[0] == read_partition_logs(DeltaTable(root))[0]
    assert follower.full_loads == 1  # every later version came from its commit file alone


def test_a_partition_known_only_by_its_position_is_given(tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    _commit(root, [], txns=[INGEST.moved_to(7, 2)])  # every record of it was rejected
    view = LogFollower(root, LOCAL).view([2, 3])
    assert view is not None
    assert view.partitions[2].committed_offset == 7 and view.partitions[2].segments == ()
    assert view.partitions[3].committed_offset is None


def test_a_replaced_table_or_missed_commits_start_over_from_a_full_read(tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    assert LogFollower(root, LOCAL).view() is None  # not created yet
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    _commit(root, [_file(root, 0, 0, range(0, 2))], txns=[INGEST.moved_to(1, 0)])
    follower = LogFollower(root, LOCAL)
    _same_as_a_full_read(follower, root)

    shutil.rmtree(root)  # deleted and created again: another table at lower versions
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    _same_as_a_full_read(follower, root)
    assert follower.full_loads == 2

    for n in range(3):  # commits the follower never read, then cleaned up behind a checkpoint
        _commit(root, [_file(root, 0, 10 * n, range(10 * n, 10 * n + 2))],
                txns=[INGEST.moved_to(10 * n + 1, 0)])
    DeltaTable(root).create_checkpoint()
    log_dir = Path(root) / "_delta_log"
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json") and int(name[:20]) < DeltaTable(root).version():
            (log_dir / name).unlink()
    _same_as_a_full_read(follower, root)
    assert follower.full_loads == 3

    # Again, the follower having seen a _last_checkpoint: the newer one is read, not the old.
    for n in range(3, 5):
        _commit(root, [_file(root, 0, 10 * n, range(10 * n, 10 * n + 2))],
                txns=[INGEST.moved_to(10 * n + 1, 0)])
    DeltaTable(root).create_checkpoint()
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json") and int(name[:20]) < DeltaTable(root).version():
            (log_dir / name).unlink()
    _same_as_a_full_read(follower, root)
    assert follower.full_loads == 4


def test_a_look_without_new_commits_reads_no_file(tmp_path: Path, monkeypatch: Any) -> None:
    """Most looks find nothing new: past the next commit's name (looked up, missing), they
    only look files up, the unchanged _last_checkpoint included (read again once changed)."""
    from compactor.lake import commit_files

    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    _commit(root, [_file(root, 0, 0, range(0, 2))], txns=[INGEST.moved_to(1, 0)])
    DeltaTable(root).create_checkpoint()
    follower = LogFollower(root, LOCAL)
    follower.view()
    reads: list[str] = []
    real = commit_files.read_log_file
    monkeypatch.setattr(commit_files, "read_log_file",
                        lambda uri, storage, name: reads.append(name) or real(uri, storage, name))
    for _ in range(5):
        follower.view()
    assert reads == [f"{DeltaTable(root).version() + 1:020d}.json"] * 5
def test_positions_for_a_commit_are_those_of_the_table_it_commits_to(tmp_path: Path) -> None:
    """The ingest commit checks the positions (another writer, a newer run) in the follower,
    not by a delta-rs lookup: they must be the committed ones, a commit by someone else too."""
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    _commit(root, [_file(root, 0, 0, range(0, 2))], txns=[INGEST.moved_to(1, 0)])
    follower = LogFollower(root, LOCAL)
    assert follower.position(INGEST.id(0)) is None  # nothing loaded yet
    table = follower.table_for_commit()
    assert follower.position(INGEST.id(0)) == 1 and follower.position(INGEST.id(1)) is None
    _commit(root, [_file(root, 1, 0, range(0, 5))],  # another process commits
            txns=[INGEST.moved_to(4, 1), INGEST.moved_to(9, 0)])
    assert follower.table_for_commit() is table and table.version() == 2
    assert follower.position(INGEST.id(0)) == 9 == INGEST.read(table, 0)
    assert follower.position(INGEST.id(1)) == 4 == INGEST.read(table, 1)
    assert follower.full_loads == 1
