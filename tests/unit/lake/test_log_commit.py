"""The ingest commit written as one commit file is a Delta commit like delta-rs's own.

Real Delta tables on disk, read back by delta-rs (another Delta implementation than the
writer), no Spark or broker.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, Transaction

from compactor.exceptions import LakeError
from compactor.lake import log_commit, operations
from compactor.lake.commit_files import Conflict, remove_stale_temporaries, sync_files
from compactor.lake.datafiles import WrittenFile, add_action
from compactor.lake.layout import LOG_PARTITION_COLUMNS, LOG_SCHEMA, ensure_table
from compactor.lake.log_follower import LogFollower
from compactor.lake.segments import read_partition_logs
from compactor.lake.storage import LOCAL
from compactor.positions import INGEST, WRITER
from tests.unit.lake.test_log_follower import _file

Positions = Callable[[str], "int | None"]


def _append(follower: LogFollower, files: list, txns: list[Transaction],
            check: Callable[[Positions], None] = lambda position: None) -> int | None:
    return log_commit.append(follower, files, txns, operations.INGEST, "test", check,
                             LOG_SCHEMA, LOG_PARTITION_COLUMNS, int(time.time() * 1000))


def _new_log(tmp_path: Path) -> tuple[str, LogFollower]:
    """An empty log table and a follower of it."""
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    return root, LogFollower(root, LOCAL)


def _commit_elsewhere(root: str, files: list, txns: list[Transaction]) -> None:
    """Another writer (delta-rs, its own snapshot) commits."""
    now_ms = int(time.time() * 1000)
    DeltaTable(root).create_write_transaction(
        [add_action(f, now_ms) for f in files], "append", LOG_SCHEMA,
        partition_by=LOG_PARTITION_COLUMNS,
        commit_properties=CommitProperties(app_transactions=txns))


def test_a_commit_file_of_ours_reads_back_in_delta_rs_as_files_positions_and_history(
        tmp_path: Path) -> None:
    root, follower = _new_log(tmp_path)
    files = [_file(root, 0, 0, range(0, 3)), _file(root, 1, 0, range(0, 2))]
    version = _append(follower, files, [INGEST.moved_to(2, 0, now_ms=5),
                                        INGEST.moved_to(1, 1, now_ms=5)])
    table = DeltaTable(root)
    assert version == table.version() == 1
    assert INGEST.read(table, 0) == 2 and INGEST.read(table, 1) == 1
    assert sorted(table.file_uris()) == sorted(f"{root}/{f.path}" for f in files)
    assert table.to_pyarrow_table().num_rows == 5
    assert table.history(1)[0]["operation"] == "WRITE"
    assert table.history(1)[0][operations.OPERATION_KEY] == operations.INGEST
    view = follower.view()
    assert view is not None and view.version == 1
    assert dict(view.partitions) == dict(read_partition_logs(table))
    assert follower.full_loads == 1


def test_add_lines_are_what_json_dumps_writes() -> None:
    """The add actions' lines, formatted directly, are byte for byte json.dumps's compact
    lines, whatever a path, a partition value or the statistics hold."""
    files = [WrittenFile("log", path, 10, {"partition": "3", "segment": "7"}, stats, 1, 5,
                         modified_ms=modified)
             for path, stats, modified in [
                 ("partition=3/segment=7/a.parquet", '{"numRecords":1}', None),
                 ('p=\u00e9 "q"/\\b\n.parquet', '{"k":"\\\"\u2028"}', 12)]]
    actions = log_commit.commit_actions(files, [INGEST.moved_to(4, 3, now_ms=9),
                                                Transaction('a"\u00e9', -1)],
                                        operations.INGEST, "é", LOG_PARTITION_COLUMNS, 99,
                                        moved=files[:1])
    assert log_commit.commit_lines(actions) == [json.dumps(a, separators=(",", ":"))
                                                for a in actions]
    assert sum("add" in a for a in actions) == 3
    assert sum("txn" in a for a in actions) == 2


def test_the_followers_own_files_are_what_their_add_actions_say(tmp_path: Path) -> None:
    """The files a commit's follower takes as written (their span) equal those it would parse
    from the add actions' statistics: offsets, timestamps (before 1970 too), horizons, sizes
    and write times."""
    import pyarrow as pa

    from compactor.lake.log_files import LogPart, write_log_files
    from compactor.lake.segments import file_from_add
    from tests.unit.lake.test_datafiles import FILE_SCHEMA, _rows

    stamped = _rows([5, 6, 9])
    stamped = stamped.set_column(
        stamped.schema.get_field_index("deleteHorizonMs"), "deleteHorizonMs",
        pa.array([None, 77, 12], pa.int64()))
    stamped = stamped.set_column(
        stamped.schema.get_field_index("timestamp"), "timestamp",
        pa.array([-1_500, 2_999, None], pa.int64()).cast(FILE_SCHEMA.field("timestamp").type))
    parts = [LogPart(p, 10 * p, _rows(list(range(10 * p, 10 * p + 1 + p % 3))), 60 + p)
             for p in range(5)] + [LogPart(7, 5, stamped, 50)]
    files = write_log_files(str(tmp_path), parts, storage=LOCAL)
    assert all(f.span is not None for f in files)
    actions = log_commit.commit_actions(files[:4], [], operations.INGEST, "x",
                                        LOG_PARTITION_COLUMNS, 1234, moved=files[4:])
    known = log_commit._known_files(files, 1234)
    parsed = {a["add"]["path"]: file_from_add(a["add"]) for a in actions if "add" in a}
    assert known == parsed and len(known) == 6


@pytest.mark.parametrize("staged", [False, True], ids=["written", "staged"])
def test_a_commit_that_loses_the_race_is_checked_again_on_the_winner_and_then_lands(
        tmp_path: Path, staged: bool) -> None:
    """Staged: a batch's commits are written ahead and synced together (``log_commit.stage``);
    the staged file itself is linked under the version after the winner's."""
    root, follower = _new_log(tmp_path)
    follower.view()
    seen: list[int | None] = []

    def check(position: Positions) -> None:
        seen.append(position(INGEST.id(1)))
        if len(seen) == 1:  # another writer takes version 1 between our check and our write
            _commit_elsewhere(root, [_file(root, 1, 0, range(0, 4))], [INGEST.moved_to(3, 1)])

    files, txns = [_file(root, 0, 0, range(0, 2))], [INGEST.moved_to(1, 0)]
    ahead = None
    if staged:
        ahead = log_commit.stage(follower, files, txns, operations.INGEST, "test",
                                 LOG_PARTITION_COLUMNS, int(time.time() * 1000))
        assert ahead is not None
        sync_files([ahead.path])
    version = log_commit.append(follower, files, txns, operations.INGEST, "test", check,
                                LOG_SCHEMA, LOG_PARTITION_COLUMNS, int(time.time() * 1000),
                                staged=ahead)
    assert seen == [None, 3]  # the second look saw the winner's position
    assert version == 2
    table = DeltaTable(root)
    assert table.version() == 2 and INGEST.read(table, 0) == 1 and INGEST.read(table, 1) == 3
    assert table.to_pyarrow_table().num_rows == 6
    if ahead is not None:
        assert (Path(root) / "_delta_log" / f"{2:020d}.json").read_text() == \
            Path(ahead.path).read_text()
        os.remove(ahead.path)  # the stager's part
    assert not [p for p in (Path(root) / "_delta_log").iterdir() if p.name.endswith(".tmp")]


def test_a_failed_check_writes_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    _commit_elsewhere(root, [], [WRITER.moved_to(2)])  # a newer run claimed the log
    follower = LogFollower(root, LOCAL)

    def check(position: Positions) -> None:
        if position(WRITER.id()) != 1:
            raise LakeError(f"generation {position(WRITER.id())}, not 1")

    with pytest.raises(LakeError, match="generation 2, not 1"):
        _append(follower, [_file(root, 0, 0, range(0, 2))], [INGEST.moved_to(1, 0)], check)
    assert DeltaTable(root).version() == 1
    assert not [p for p in (Path(root) / "_delta_log").iterdir() if p.name.endswith(".tmp")]


def test_checkpoints_are_written_at_the_interval_and_expired_commit_files_removed(
        tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    DeltaTable(root).alter.set_table_properties({
        "delta.checkpointInterval": "5", "delta.logRetentionDuration": "interval 0 seconds"})
    follower = LogFollower(root, LOCAL)
    for offset in range(9):  # versions 2..10
        _append(follower, [_file(root, 0, 0, range(offset, offset + 1))],
                [INGEST.moved_to(offset, 0)])
    log_dir = Path(root) / "_delta_log"
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 10
    assert (log_dir / f"{10:020d}.checkpoint.parquet").exists()
    commits = sorted(int(p.name[:20]) for p in log_dir.iterdir() if p.name.endswith(".json"))
    assert commits[0] >= 5  # the ones before the earlier checkpoint are gone
    table = DeltaTable(root)
    assert table.version() == 10 and INGEST.read(table, 0) == 8
    assert table.to_pyarrow_table().num_rows == 9
    assert dict(LogFollower(root, LOCAL).view().partitions) == dict(read_partition_logs(table))


def test_the_followers_delta_rs_table_starts_from_the_newest_checkpoint(tmp_path: Path) -> None:
    """A delta-rs table advanced in place keeps every commit since it was opened (deltalake
    1.6), so a follower running for months opens it again at each checkpoint: through our own
    commit files, and through delta-rs's commits once an interval has passed. Positions
    looked up in it stay the committed ones."""
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    DeltaTable(root).alter.set_table_properties({"delta.checkpointInterval": "5"})
    follower = LogFollower(root, LOCAL)
    for offset in range(12):  # versions 2..13: our checkpoints at 5 and 10
        _append(follower, [_file(root, 0, 0, range(offset, offset + 1))],
                [INGEST.moved_to(offset, 0)])
    assert follower.base_opened_at == 10
    table = follower.table_for_commit()
    assert table.version() == 13 and follower.position(INGEST.id(0)) == 11
    assert follower.base_opened_at == 10 and follower.full_loads == 1

    DeltaTable(root).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    opened = set()
    for offset in range(12, 24):  # versions 15..26, committed by delta-rs
        assert _append(follower, [_file(root, 0, 0, range(offset, offset + 1))],
                       [INGEST.moved_to(offset, 0)]) is None
        opened.add(follower.base_opened_at)
        assert DeltaTable(root).version() - follower.base_opened_at <= 5
    assert len(opened) >= 3 and follower.full_loads == 1
    table = follower.table_for_commit()
    assert table.version() == 26 and INGEST.read(table, 0) == 23
    assert follower.position(INGEST.id(0)) == 23
    assert dict(follower.view().partitions) == dict(read_partition_logs(DeltaTable(root)))


def test_a_table_with_features_we_do_not_write_is_committed_by_delta_rs(tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    DeltaTable(root).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    assert DeltaTable(root).protocol().min_writer_version > 2
    follower = LogFollower(root, LOCAL)
    assert _append(follower, [_file(root, 0, 0, range(0, 2))], [INGEST.moved_to(1, 0)]) is None
    table = DeltaTable(root)
    assert INGEST.read(table, 0) == 1 and table.to_pyarrow_table().num_rows == 2
    assert table.history(1)[0]["engineInfo"].startswith("delta-rs")


def test_removes_and_rewrites_land_once_and_a_second_remove_of_a_file_conflicts(
        tmp_path: Path) -> None:
    root, follower = _new_log(tmp_path)
    small = [_file(root, 0, 0, range(0, 2)), _file(root, 0, 0, range(2, 4))]
    _append(follower, small, [INGEST.moved_to(3, 0)])
    view = follower.view()
    assert view is not None
    live = list(view.partitions[0].segments[0].files)
    merged = _file(root, 0, 0, range(0, 4))
    blind = log_commit.commit_lines(
        log_commit.commit_actions([], [], operations.INGEST, "nothing removed", [], 0))
    assert json.loads(blind[0])["commitInfo"]["isBlindAppend"] is True
    version = log_commit.append(
        follower, [], [], operations.REWRITE_SEGMENTS, "merge", lambda position: None,
        LOG_SCHEMA, LOG_PARTITION_COLUMNS, int(time.time() * 1000),
        removes=[(f, False) for f in live], moved=[merged])
    table = DeltaTable(root)
    assert version == table.version() == 2
    assert table.file_uris() == [f"{root}/{merged.path}"]
    assert table.to_pyarrow_table().num_rows == 4
    changes = [json.loads(line) for line in
               (Path(root) / "_delta_log" / f"{2:020d}.json").read_text().splitlines()]
    assert {c["remove"]["dataChange"] for c in changes if "remove" in c} == {False}
    assert {c["add"]["dataChange"] for c in changes if "add" in c} == {False}

    with pytest.raises(Conflict, match="no longer in the log at version 2"):
        log_commit.append(follower, [], [], operations.RETENTION, "again",
                          lambda position: None, LOG_SCHEMA, LOG_PARTITION_COLUMNS, 0,
                          removes=[(live[0], True)])
    assert DeltaTable(root).version() == 2


def test_a_checkpoint_sweeps_temporary_commit_files_older_than_an_hour_and_no_others(
        tmp_path: Path) -> None:
    root = str(tmp_path / "log")
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    DeltaTable(root).alter.set_table_properties({"delta.checkpointInterval": "5"})
    log_dir = Path(root) / "_delta_log"
    # A writer that died between writing and linking (step 4) left these behind: one two
    # hours ago, one a minute ago (as if still being linked), both for versions to come.
    stale = log_dir / f".{3:020d}.json.{'a' * 32}.tmp"
    recent = log_dir / f".{4:020d}.json.{'b' * 32}.tmp"
    for path, age_s in ((stale, 2 * 3600), (recent, 60)):
        path.write_text("{}\n")
        then = time.time() - age_s
        os.utime(path, (then, then))
    follower = LogFollower(root, LOCAL)
    for offset in range(3):  # versions 2..4: no checkpoint yet, nothing swept
        _append(follower, [_file(root, 0, 0, range(offset, offset + 1))],
                [INGEST.moved_to(offset, 0)])
    assert stale.exists() and recent.exists()
    _append(follower, [_file(root, 0, 0, range(3, 4))], [INGEST.moved_to(3, 0)])  # version 5
    assert (log_dir / f"{5:020d}.checkpoint.parquet").exists()
    assert not stale.exists() and recent.exists()
    table = DeltaTable(root)  # the commits the temporaries' names collide with are intact
    assert table.version() == 5 and table.to_pyarrow_table().num_rows == 4


def test_the_sweep_leaves_commit_files_and_checkpoints_alone(tmp_path: Path) -> None:
    old = time.time() - 10 * 3600
    names = [f"{1:020d}.json", f"{1:020d}.checkpoint.parquet", "_last_checkpoint",
             f".{1:020d}.json.{'c' * 32}.tmp", ".hidden"]
    for name in names:
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (old, old))
    assert remove_stale_temporaries(str(tmp_path), time.time()) == [names[3]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n in names if n != names[3])


def test_the_newest_version_is_told_by_two_commit_files(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from compactor.lake.commit_files import is_newest

    path = str(tmp_path / "t")
    for _ in range(3):
        write_deltalake(path, pa.table({"a": [1]}), mode="append")
    assert [is_newest(path, LOCAL, v) for v in range(4)] == [False, False, True, False]
    log_dir = tmp_path / "t" / "_delta_log"
    for v in (0, 1):  # log cleanup removes the oldest commits first
        os.remove(log_dir / f"{v:020d}.json")
    assert [is_newest(path, LOCAL, v) for v in range(4)] == [False, False, True, False]


def test_staged_commits_synced_at_once_stop_at_a_file_that_cannot_be_synced(
        tmp_path: Path) -> None:
    """The commits of many topics are synced together; one that cannot be synced raises, so
    that none of them is linked under its version (commit_ranges stops before linking)."""
    from compactor.lake import commit_files

    logs = [tmp_path / f"t{i}" / "_delta_log" for i in range(5)]
    for log_dir in logs:
        log_dir.mkdir(parents=True)
    staged = [commit_files.stage(str(d), ['{"commitInfo":{}}'], sync=False) for d in logs]
    sync_files(staged)  # all there: no error
    os.remove(staged[3])
    with pytest.raises(FileNotFoundError):
        sync_files(staged)


def test_paths_are_quoted_as_urllib_quotes_them() -> None:
    """A path of the log's own characters is taken as it is, any other quoted by urllib."""
    for path in ["partition=1/segment=0/00000000000000000001-00000000000000000002.9b.ab.parquet",
                 "a b/é", "x%y", "~a_b-c.d", "q?r#s&t+u,v;w:x@y!z*'()"]:
        assert log_commit._path(path) == quote(path, safe="/=")
