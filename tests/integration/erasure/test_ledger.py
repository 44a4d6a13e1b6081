"""The erasure ledger on real Delta tables (no broker)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.erasure.ledger import ErasureLedger, key_digest
from compactor.lake.layout import ensure_table, topic_paths
from tests.lake import append, offline_config

T0 = 1_700_000_000_000


def test_tombstones_are_recorded_once_with_a_salted_digest_and_no_key(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    append(config, "t", 0, [(0, b"SECRET-alice", b"v", T0), (1, b"SECRET-alice", None, T0 + 5),
                            (2, b"SECRET-bob", None, T0 + 9)], now_ms=T0)
    ledger = ErasureLedger(config)
    assert ledger.record_tombstones("t") == 2
    assert ErasureLedger(config).record_tombstones("t") == 0  # a restart records nothing twice
    root = Path(topic_paths(config.lake_path, "t").root) / "erasures"
    rows = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    salt = str(DeltaTable(topic_paths(config.lake_path, "t").log).metadata().id).encode()
    assert sorted((r["offset"], r["keyDigest"], r["tombstoneTimeMs"], r["deadlineMs"])
                  for r in rows) == [(1, key_digest(salt, b"SECRET-alice"), T0 + 5, T0 + 60_005),
                                     (2, key_digest(salt, b"SECRET-bob"), T0 + 9, T0 + 60_009)]
    for f in root.rglob("*"):
        if f.is_file():
            assert b"SECRET" not in f.read_bytes(), f


def _two_tombstones_recorded(tmp_path: Path) -> tuple[ErasureLedger, int]:
    """A compacted topic whose log holds two tombstones (offsets 0 and 1, timestamped now),
    recorded in its ledger; the ledger and that now."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    now = int(time.time() * 1000)
    append(config, "t", 0, [(0, b"a", None, now), (1, b"b", None, now + 1)], now_ms=now)
    ledger = ErasureLedger(config)
    ledger.record_tombstones("t")
    return ledger, now


def test_the_backlog_comes_from_the_events(tmp_path: Path) -> None:
    ledger, now = _two_tombstones_recorded(tmp_path)
    backlog = ledger.backlog("t", now_ms=now + 1000)
    assert (backlog.pending, backlog.oldest_pending_age_ms, backlog.missed_deadlines) == \
        (2, 1000, 0)
    ledger.record_done("t", "table", {0: 1})
    ledger.record_done("t", "log", {0: 0})  # both targets done for offset 0, in time
    assert ledger.backlog("t", now_ms=now + 1000).pending == 1  # the log is not past offset 1
    late = ledger.backlog("t", now_ms=now + 70_000)
    assert late.pending == 1 and late.missed_deadlines == 1  # offset 1 is overdue
    ledger.record_done("t", "log", {0: 1})
    assert ledger.backlog("t", now_ms=now + 70_000) == type(late)(0, None, 0)


def test_reconcile_restores_done_events_a_crash_lost(tmp_path: Path) -> None:
    from deltalake.transaction import CommitProperties

    from compactor.lake.latest_table import catch_up
    from compactor.positions import CLEANER, TABLE

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    now = int(time.time() * 1000)
    append(config, "t", 0, [(0, b"a", b"v", now), (1, b"a", None, now + 1),
                            (2, b"b", None, now + 2), (3, b"c", b"v", now + 3)], now_ms=now)
    ledger = ErasureLedger(config)
    ledger.record_tombstones("t")
    # the table's MERGE committed; its done event was "lost"
    catch_up(config.lake_path, "t", config.storage)
    paths = topic_paths(config.lake_path, "t")
    assert TABLE.read(DeltaTable(paths.table), 0) == 3
    # A cleaner commit that moved the checkpoint to 2 (offsets 0..1 cleaned), done event lost.
    DeltaTable(paths.log).create_write_transaction(
        [], "append", DeltaTable(paths.log).schema(),
        commit_properties=CommitProperties(
            app_transactions=[CLEANER.moved_to(2, 0)]))
    assert ledger.backlog("t").pending == 2

    assert ledger.reconcile("t", now_ms=now + 500) == {"log": {0: 1}, "table": {0: 3}}
    backlog = ledger.backlog("t", now_ms=now + 1000)
    assert backlog.pending == 1  # offset 2 is not below the cleaner checkpoint yet
    assert ledger.reconcile("t") == {}  # nothing twice


def test_two_processes_recording_the_same_tombstones_record_them_once(
        tmp_path: Path, monkeypatch) -> None:
    """``compactor clean`` beside ``compactor run``: both read the tombstones; the ledger's app
    transactions make the slower commit fail, and it records nothing twice."""
    import compactor.erasure.ledger as ledger_module

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    append(config, "t", 0, [(0, b"a", None, T0), (1, b"b", None, T0 + 1)], now_ms=T0)
    real = ledger_module.write_deltalake
    other = ErasureLedger(config)

    def commit_after_the_other(*args, **kwargs):  # the other process commits in between
        monkeypatch.setattr(ledger_module, "write_deltalake", real)
        assert other.record_tombstones("t") == 2
        return real(*args, **kwargs)

    monkeypatch.setattr(ledger_module, "write_deltalake", commit_after_the_other)
    slower = ErasureLedger(config)
    assert slower.record_tombstones("t") == 0
    assert slower.record_tombstones("t") == 0  # and it does not read them again as new
    root = Path(topic_paths(config.lake_path, "t").root) / "erasures"
    rows = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    assert sorted(r["offset"] for r in rows if r["event"] == "tombstone") == [0, 1]


def test_a_scan_after_another_process_recorded_further_records_nothing_twice(
        tmp_path: Path) -> None:
    """This process's scans skip looking up positions while the ledger is where it left it;
    once another process has recorded newer tombstones, they are not recorded again."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    append(config, "t", 0, [(0, b"a", None, T0)], now_ms=T0)
    append(config, "t", 1, [(0, b"b", None, T0)], now_ms=T0)
    running = ErasureLedger(config)
    assert running.record_tombstones("t") == 2
    append(config, "t", 0, [(1, b"c", None, T0 + 1)], now_ms=T0)
    assert running.record_tombstones("t") == 1  # its own position: no lookup needed
    append(config, "t", 0, [(2, b"d", None, T0 + 2)], now_ms=T0)
    append(config, "t", 1, [(1, b"e", None, T0 + 2)], now_ms=T0)
    assert ErasureLedger(config).record_tombstones("t") == 2  # compactor clean, say
    append(config, "t", 0, [(3, b"f", None, T0 + 3)], now_ms=T0)
    assert running.record_tombstones("t") == 1  # offset 3 only
    root = Path(topic_paths(config.lake_path, "t").root) / "erasures"
    rows = DeltaTable(str(root)).to_pyarrow_table().to_pylist()
    assert sorted((r["partition"], r["offset"]) for r in rows if r["event"] == "tombstone") == \
        [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]


def test_a_ledger_of_many_small_files_is_compacted_to_one_with_the_same_events(
        tmp_path: Path) -> None:
    from compactor.erasure import ledger as ledger_module

    ledger, now = _two_tombstones_recorded(tmp_path)
    for i in range(ledger_module.COMPACT_AT_FILES - 2):  # a done event per micro-batch
        ledger.record_done("t", "table", {0: i % 2}, now_ms=now + i)
    assert ledger.compact("t") == 0  # one file short of the threshold
    ledger.record_done("t", "log", {0: 1}, now_ms=now + 500)
    before = sorted(DeltaTable(ledger.path("t")).to_pyarrow_table().to_pylist(),
                    key=lambda r: (r["event"], r["atMs"], r["offset"]))
    assert len(DeltaTable(ledger.path("t")).file_uris()) == ledger_module.COMPACT_AT_FILES

    assert ledger.compact("t") == ledger_module.COMPACT_AT_FILES
    table = DeltaTable(ledger.path("t"))
    assert len(table.file_uris()) == 1
    assert sorted(table.to_pyarrow_table().to_pylist(),
                  key=lambda r: (r["event"], r["atMs"], r["offset"])) == before
    assert table.history(1)[0]["compactor.operation"] == "COMPACT LEDGER"
    assert ledger.backlog("t", now_ms=now + 1000).pending == 0  # both targets done


def test_compaction_rewrites_the_small_files_and_leaves_a_long_history_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weeks of tombstones make files past the target size: a pass must not rewrite them
    (it runs under the commit lock), only the latest micro-batches' files and the one file
    still filling up, so its cost does not grow with the ledger's history."""
    import os

    import pyarrow as pa
    from deltalake import write_deltalake

    from compactor.erasure import ledger as ledger_module

    monkeypatch.setattr(ledger_module, "COMPACT_TARGET_BYTES", 1024 * 1024)
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    ledger = ErasureLedger(config)
    assert ledger.compact("t") == 0  # no ledger yet
    ensure_table(ledger.path("t"), ledger_module.LEDGER_SCHEMA, None,
                 ledger_module.LEDGER_PROPERTIES, storage=config.storage)
    assert ledger.compact("t") == 0  # a ledger without files
    n = 60_000  # digests are random: about 2 MB in one file, past the target
    write_deltalake(ledger.path("t"), pa.table({
        "event": ["tombstone"] * n, "partition": [0] * n, "offset": list(range(n)),
        "keyDigest": [os.urandom(16) for _ in range(n)], "tombstoneTimeMs": [T0] * n,
        "deadlineMs": [T0 + 60_000] * n, "target": [None] * n, "atMs": [T0] * n,
    }, schema=ledger_module.LEDGER_SCHEMA), mode="append")
    history = DeltaTable(ledger.path("t")).file_uris()
    assert Path(history[0].removeprefix("file://")).stat().st_size > 1024 * 1024

    def events() -> list[dict[str, object]]:
        rows = DeltaTable(ledger.path("t")).to_pyarrow_table().to_pylist()
        return sorted(rows, key=lambda r: (r["event"], r["offset"], r["target"] or "",
                                           r["atMs"]))

    for i in range(ledger_module.COMPACT_AT_FILES - 1):  # 64 files, 63 of them small
        ledger.record_done("t", "table", {0: i}, now_ms=T0 + i)
    assert ledger.compact("t") == 0  # the large file does not count towards a pass
    ledger.record_done("t", "log", {0: n - 1}, now_ms=T0 + 100)
    before = events()
    assert ledger.compact("t") == ledger_module.COMPACT_AT_FILES
    files = DeltaTable(ledger.path("t")).file_uris()
    assert len(files) == 2 and history[0] in files  # the history was not rewritten
    assert events() == before

    for i in range(ledger_module.COMPACT_AT_FILES):
        ledger.record_done("t", "table", {0: n - 1}, now_ms=T0 + 200 + i)
    before = events()
    # the next pass takes the small files and the one the last pass wrote, not the history
    assert ledger.compact("t") == ledger_module.COMPACT_AT_FILES + 1
    files = DeltaTable(ledger.path("t")).file_uris()
    assert len(files) == 2 and history[0] in files
    assert events() == before
    assert ledger.backlog("t", now_ms=T0 + 1000) == ErasureLedger(config).backlog(
        "t", now_ms=T0 + 1000)
    assert ledger.backlog("t", now_ms=T0 + 1000).pending == 0  # both targets through n - 1


def test_the_backlog_follows_new_commits_through_compaction_and_checkpoints(
        tmp_path: Path) -> None:
    """A mirror's metrics ask for the backlog after every cleaning pass: it reads the ledger
    whole once, then only new commits, and counts what a fresh full read counts."""
    import shutil

    from compactor.erasure import ledger as ledger_module

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    now = int(time.time() * 1000)
    ledger = ErasureLedger(config)
    assert ledger.backlog("t", now_ms=now).pending == 0  # no ledger yet
    offset = 0
    compact_at = ledger_module.COMPACT_AT_FILES // 2 + 1  # two ledger files a batch
    for batch in range(compact_at + 4):  # past a compaction and checkpoints
        append(config, "t", 0, [(offset, b"k%d" % batch, None, now + batch),
                                (offset + 1, b"k", b"v", now + batch)], now_ms=now)
        ledger.record_tombstones("t")
        target = "table" if batch % 2 else "log"
        ledger.record_done("t", target, {0: offset - 2}, now_ms=now + batch * 1000)
        offset += 2
        if batch == compact_at:
            assert ledger.compact("t") > 0  # its rewrite must not count events twice
        at = now + batch * 1000 + 500
        followed = ledger.backlog("t", now_ms=at)
        if batch % 5 == 0 or batch >= compact_at:
            assert followed == ErasureLedger(config).backlog("t", now_ms=at)
    followed = ledger.backlog("t", now_ms=now + 70_000)
    assert followed.pending >= 2 and followed.missed_deadlines >= 2
    assert ledger._backlogs["t"].full_loads == 1
    assert Path(ledger.path("t"), "_delta_log", "_last_checkpoint").exists()

    # The ledger deleted and recreated under the process: it starts over from a full read.
    shutil.rmtree(ledger.path("t"))
    fresh = ErasureLedger(config)
    fresh.record_tombstones("t")  # records the log's tombstones again, into a new table
    assert ledger.backlog("t", now_ms=now + 70_000) == fresh.backlog("t", now_ms=now + 70_000)
    assert ledger.backlog("t", now_ms=now + 70_000).pending == len(
        [r for r in DeltaTable(ledger.path("t")).to_pyarrow_table().to_pylist()
         if r["event"] == "tombstone"])
    assert ledger._backlogs["t"].full_loads == 2
