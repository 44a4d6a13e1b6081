"""No tombstone is cleaned away before the ledger and the downstream tables have read it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from compactor.cleaner.maintenance import LogMaintenance
from compactor.lake.segments import read_partition_logs
from tests.lake import append, log_rows, offline_config

T0 = 1_700_000_000_000


def test_a_pass_after_a_crash_carries_superseded_tombstones_before_cleaning(
        tmp_path: Path) -> None:
    """A run died after its ingest commit, before the ledger and the downstream delete ran;
    the next pass (here: ``compactor clean``'s) must not clean the tombstone away unread,
    although a later record of the key supersedes it."""
    marts = tmp_path / "profiles"
    write_deltalake(str(marts), pa.table({"user_id": ["alice", "bob", "carol"],
                                          "plan": ["pro", "free", "free"]}))
    config = offline_config(
        str(tmp_path / "lake"), "t", cleanup_policy="compact", segment_bytes=20,
        min_cleanable_dirty_ratio=0.01, max_compaction_lag_ms=600_000,
        downstream_profiles_path=str(marts), downstream_profiles_topic="t",
        downstream_profiles_key_column="user_id")
    # alice is erased at offset 1 and signs up again at 3; only the log commit happened.
    append(config, "t", 0, [(0, b"alice", b"v0", T0), (1, b"alice", None, T0 + 1),
                            (2, b"bob", b"v2", T0 + 2), (3, b"alice", b"v3", T0 + 3),
                            (4, b"carol", b"v4", T0 + 4), (5, b"dave", b"v5", T0 + 5),
                            (6, b"erin", b"v6", T0 + 6)], now_ms=T0 + 10)
    report = LogMaintenance(None, config).run_pass(force=True, now_ms=T0 + 1_000)
    assert report.cleaned, "the pass cleaned nothing: the test shows nothing"

    offsets = [o for _, o, *_ in log_rows(config, "t")]
    assert 0 not in offsets and 1 not in offsets  # cleaned: superseded by offset 3
    ledger = DeltaTable(str(tmp_path / "lake" / "t" / "erasures")).to_pyarrow_dataset()
    recorded = [r["offset"] for r in ledger.to_table().to_pylist() if r["event"] == "tombstone"]
    assert recorded == [1], "the erasure of alice went unrecorded"
    users = DeltaTable(str(marts)).to_pyarrow_dataset().to_table().column("user_id").to_pylist()
    assert sorted(users) == ["bob", "carol"], "alice's downstream row outlived her erasure"
    log = read_partition_logs(DeltaTable(str(tmp_path / "lake" / "t" / "log")))[0]
    assert log.cleaner_offset is not None and log.cleaner_offset > 1


def test_when_a_reader_fails_the_topic_is_not_cleaned(tmp_path: Path) -> None:
    marts = tmp_path / "profiles"
    write_deltalake(str(marts), pa.table({"user_id": ["alice"], "plan": ["pro"]}))
    config = offline_config(
        str(tmp_path / "lake"), "t", cleanup_policy="compact", segment_bytes=20,
        min_cleanable_dirty_ratio=0.01, downstream_profiles_path=str(marts),
        downstream_profiles_topic="t", downstream_profiles_key_column="user_id")
    append(config, "t", 0, [(0, b"alice", b"v0", T0), (1, b"alice", None, T0 + 1),
                            (2, b"alice", b"v2", T0 + 2), (3, b"bob", b"v3", T0 + 3),
                            (4, b"carol", b"v4", T0 + 4)], now_ms=T0 + 10)
    before = log_rows(config, "t")
    for f in (marts / "_delta_log").iterdir():
        f.write_text("not json")  # the downstream table cannot be read now
    report = LogMaintenance(None, config).run_pass(force=True, now_ms=T0 + 1_000)
    assert not report.cleaned and log_rows(config, "t") == before


def test_a_pass_records_what_the_log_finished_in_one_ledger_commit(tmp_path: Path) -> None:
    """Each cleaned partition's done event (the log finished its tombstones up to the new
    checkpoint), dated no earlier than that partition's cleaning commit, all in one commit."""
    config = offline_config(str(tmp_path / "lake"), "t", cleanup_policy="compact",
                            segment_bytes=20, min_cleanable_dirty_ratio=0.01,
                            max_compaction_lag_ms=600_000)
    for p in (0, 1, 2):
        append(config, "t", p, [(0, b"alice", b"v0", T0), (1, b"alice", None, T0 + 1),
                                (2, b"bob", b"v2", T0 + 2), (3, b"alice", b"v3", T0 + 3),
                                (4, b"carol", b"v4", T0 + 4), (5, b"dave", b"v5", T0 + 5)],
               now_ms=T0 + 10)
    report = LogMaintenance(None, config).run_pass(force=True, now_ms=T0 + 1_000)
    assert len(report.cleaned) == 3
    ledger = DeltaTable(str(tmp_path / "lake" / "t" / "erasures"))
    done = [r for r in ledger.to_pyarrow_table().to_pylist() if r["event"] == "done"]
    log = read_partition_logs(DeltaTable(str(tmp_path / "lake" / "t" / "log")))
    assert sorted((r["partition"], r["target"], r["offset"]) for r in done) == [
        (p, "log", (log[p].cleaner_offset or 0) - 1) for p in (0, 1, 2)]
    cleaned_at = [c["timestamp"] for c in DeltaTable(str(tmp_path / "lake" / "t" / "log"))
                  .history() if c.get("compactor.operation") == "CLEAN"]
    assert len(cleaned_at) == 3 and all(r["atMs"] >= min(cleaned_at) for r in done)
    assert len([c for c in ledger.history()
                if "finished the tombstones" in str(c.get("userMetadata", ""))]) == 1
