"""Cleaner cases on real Delta tables written by the product's ingest code, without a broker.

Passes run in-process (``LogMaintenance(None, ...)``), so each case controls the clock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cleaner.maintenance import LogMaintenance
from compactor.cleaner.offset_map import BYTES_PER_ENTRY
from compactor.cleaner.partition_cleaner import Throttler
from compactor.lake.layout import topic_paths
from compactor.ops.status import collect_status
from tests.lake import append, log_rows, offline_config

T0 = 1_700_000_000_000


def segments_of(config, topic: str) -> dict[int, list[int]]:
    table = DeltaTable(topic_paths(config.lake_path, topic).log).to_pyarrow_table(
        columns=["segment", "offset"])
    out: dict[int, list[int]] = {}
    for seg, off in zip(table.column("segment").to_pylist(), table.column("offset").to_pylist(),
                        strict=True):
        out.setdefault(seg, []).append(off)
    return {k: sorted(v) for k, v in sorted(out.items())}


def test_small_changed_neighbours_merge_into_one_segment(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_ms=1000,
                            min_cleanable_dirty_ratio=0.01)
    # Records 2 s apart: each rolls a segment of its own by time.
    keys = [b"k0", b"k1", b"k2", b"k0", b"k1", b"k2"]
    append(config, "t", 0, [(i, k, b"v%d" % i, T0 + 2000 * i) for i, k in enumerate(keys)],
           now_ms=T0 + 10_000)
    assert segments_of(config, "t") == {i: [i] for i in range(6)}
    LogMaintenance(None, config).run_pass(now_ms=T0 + 10_500)
    # Offsets 0 and 1 are superseded; segments 0-4 fit in segment.bytes and become segment 0.
    assert segments_of(config, "t") == {0: [2, 3, 4], 5: [5]}


@pytest.mark.parametrize("keys", [
    [b"a", b"b", b"c", b"c", b"d", b"e"],  # the first change is in the group's third segment
    [b"a", b"a", b"b", b"c", b"d", b"e"],  # in its first, and the later ones do not change
    [b"a", b"b", b"a", b"c", b"c", b"e"],  # in its first and in a later one
])
def test_a_group_keeps_exactly_the_latest_records_wherever_its_first_change_is(
        tmp_path: Path, keys: list[bytes]) -> None:
    # Segments up to the first that changes are decided on a few columns and then copied;
    # the ones after it are decided while they are copied. Either way, the same records.
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_ms=1000,
                            min_cleanable_dirty_ratio=0.01)
    append(config, "t", 0, [(i, k, b"v%d" % i, T0 + 2000 * i) for i, k in enumerate(keys)],
           now_ms=T0 + 10_000)
    LogMaintenance(None, config).run_pass(now_ms=T0 + 10_500)
    last = {k: i for i, k in enumerate(keys[:-1])}  # the active segment (offset 5) stays
    kept = sorted({*last.values(), len(keys) - 1})
    assert [(o, k, v) for _p, o, k, v, _h in log_rows(config, "t")] == [
        (o, keys[o], b"v%d" % o) for o in kept]
    assert segments_of(config, "t") == {0: kept[:-1], 5: [5]}


def test_a_group_that_ends_up_empty_leaves_no_file(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=20,
                            min_cleanable_dirty_ratio=0.01)
    rows = [(0, b"k0", b"a" * 8), (1, b"k1", b"b" * 8), (2, b"k0", b"c" * 8),
            (3, b"k1", b"d" * 8), (4, b"k9", b"e" * 8)]
    append(config, "t", 0, [(o, k, v, T0) for o, k, v in rows], now_ms=T0)
    assert list(segments_of(config, "t")) == [0, 2, 4]
    LogMaintenance(None, config).run_pass(now_ms=T0 + 1)
    assert segments_of(config, "t") == {2: [2, 3], 4: [4]}
    table = DeltaTable(topic_paths(config.lake_path, "t").log)
    assert not [u for u in table.file_uris() if "segment=0/" in u]


def test_a_full_map_cleans_the_prefix_and_the_next_pass_continues(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=1000,
                            segment_ms=1000, min_cleanable_dirty_ratio=0.01, **{
                                "log.cleaner.dedupe.buffer.size": str(2 * BYTES_PER_ENTRY),
                                "log.cleaner.io.buffer.load.factor": "1.0"})
    keys = [b"a", b"b", b"a", b"c", b"d", b"c", b"e"]
    append(config, "t", 0, [(i, k, b"v%d" % i, T0) for i, k in enumerate(keys)], now_ms=T0)
    maintenance = LogMaintenance(None, config)
    first = maintenance.run_pass(now_ms=T0 + 2000)  # the lone segment has rolled by then
    assert first.outcomes[0].result.checkpoint == 3  # {a, b} filled the map at offset 2
    assert [r[1] for r in log_rows(config, "t")] == [1, 2, 3, 4, 5, 6]
    second = maintenance.run_pass(now_ms=T0 + 2000)
    # {c, d} fill the map; c@5 still fits (its key is known), e@6 does not.
    assert second.outcomes[0].result.checkpoint == 6
    assert [r[1] for r in log_rows(config, "t")] == [1, 2, 4, 5, 6]
    third = maintenance.run_pass(now_ms=T0 + 2000)
    assert third.outcomes[0].result.checkpoint == 7
    assert [r[1] for r in log_rows(config, "t")] == [1, 2, 4, 5, 6]


def test_vacuum_waits_for_the_grace_and_removes_old_orphans(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=20,
                            min_cleanable_dirty_ratio=0.01, vacuum_grace_ms=1500)
    append(config, "t", 0, [(i, b"k", b"v" * 10, T0) for i in range(4)], now_ms=T0)
    root = Path(topic_paths(config.lake_path, "t").log)
    before = {p for p in root.rglob("*.parquet")}
    old_orphan = root / "partition=0" / "segment=0" / "orphan-old.parquet"
    new_orphan = root / "partition=0" / "segment=0" / "orphan-new.parquet"
    for orphan in (old_orphan, new_orphan):
        orphan.write_bytes(b"left by a pass that died")
    two_hours_ago = time.time() - 7200
    os.utime(old_orphan, (two_hours_ago, two_hours_ago))

    maintenance = LogMaintenance(None, config)
    report = maintenance.run_pass(now_ms=T0 + 1)
    reported = report.vacuumed
    removed = before - {Path(u.removeprefix("file://")) for u in
                        DeltaTable(str(root)).file_uris()}
    assert removed and all(p.exists() for p in removed)  # readers of old snapshots still work
    assert not old_orphan.exists() and new_orphan.exists()
    assert DeltaTable(str(root)).metadata().configuration[
        "delta.deletedFileRetentionDuration"] == "interval 1500 milliseconds"  # exact grace
    deadline = time.time() + 30
    while any(p.exists() for p in removed) and time.time() < deadline:
        time.sleep(0.5)
        reported += maintenance.run_pass(now_ms=T0 + 1).vacuumed
    assert not any(p.exists() for p in removed), "removed files outlived the grace period"
    reported += maintenance.run_pass(now_ms=T0 + 1).vacuumed  # nothing left: counts nothing
    assert reported == len(removed) + 1  # every removed file and the old orphan, once each


def test_a_service_vacuums_a_topic_once_its_removals_pass_the_grace(tmp_path: Path) -> None:
    """A running service's passes vacuum a topic without an erasure deadline when something
    can be deleted (its first pass, a removal past the grace), not at every pass: a vacuum
    opens every table of the topic."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=20,
                            min_cleanable_dirty_ratio=0.01, vacuum_grace_ms=1500)
    now = int(time.time() * 1000)
    append(config, "t", 0, [(i, b"k", b"v" * 10, now) for i in range(4)], now_ms=now)
    root = Path(topic_paths(config.lake_path, "t").log)
    before = set(root.rglob("*.parquet"))

    maintenance = LogMaintenance(None, config, vacuum_when_due=True)
    assert maintenance.vacuum.is_due("t", now)  # the run's first pass: an earlier run's files
    maintenance.run_pass()  # cleans, so removes files, and vacuums
    removed = before - {Path(u.removeprefix("file://")) for u in
                        DeltaTable(str(root)).file_uris()}
    assert removed and all(p.exists() for p in removed)
    assert not maintenance.vacuum.is_due("t", int(time.time() * 1000))  # within the grace

    deadline = time.time() + 30
    while any(p.exists() for p in removed) and time.time() < deadline:
        time.sleep(0.1)
        maintenance.run_pass()
    assert not any(p.exists() for p in removed), "removed files outlived the grace period"
    # A removal's wake-up (its grace plus a slack) may come just after the vacuum that
    # served it: past it, one more pass serves it and leaves nothing due.
    time.sleep(0.1)
    maintenance.run_pass()
    now = int(time.time() * 1000)
    assert not maintenance.vacuum.is_due("t", now)
    # Without a removal, the next vacuum comes a grace after the last (orphans, commit files).
    assert maintenance.vacuum.is_due("t", now + 1500)

    deadline_config = offline_config(str(tmp_path / "d"), "d", cleanup_policy="compact",
                                     max_compaction_lag_ms=60_000, vacuum_grace_ms=1500)
    erasing = LogMaintenance(None, deadline_config, vacuum_when_due=True)
    erasing.run_pass()
    # An erasure deadline: every pass, for orphans and a crashed run's removals.
    assert erasing.vacuum.is_due("d", int(time.time() * 1000))


def test_a_failing_partition_is_marked_uncleanable_and_the_others_go_on(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=20,
                            min_cleanable_dirty_ratio=0.01)
    for partition in (0, 1):
        append(config, "t", partition, [(i, b"k", b"v" * 10, T0) for i in range(4)], now_ms=T0)
    root = Path(topic_paths(config.lake_path, "t").log)
    victim = sorted((root / "partition=0").rglob("*.parquet"))[0]
    original = victim.read_bytes()
    victim.write_bytes(b"not parquet at all")

    maintenance = LogMaintenance(None, config)
    report = maintenance.run_pass(now_ms=T0 + 1)
    by_partition = {o.partition: o for o in report.outcomes}
    assert not by_partition[0].committed and by_partition[1].committed
    # The erasure ledger reads tombstones before the cleaner and is the first to fail here.
    assert victim.name in maintenance.uncleanable[("t", 0)]
    skipped = maintenance.run_pass(now_ms=T0 + 2)
    assert {o.partition: o.result for o in skipped.outcomes}[0] is None
    maintenance.uncleanable.clear()  # a restart: every partition is tried again, and fails
    again = maintenance.run_pass(force=True, now_ms=T0 + 3)
    assert not {o.partition: o.committed for o in again.outcomes}[0]
    assert victim.name in maintenance.uncleanable[("t", 0)]

    # 'compactor status', another process, sees it from the log: when and why.
    stuck = {p.partition: p for p in collect_status(config, ask_broker=False)[0][0].partitions}
    assert stuck[0].uncleanable_since_ms is not None and stuck[1].uncleanable_since_ms is None
    assert victim.name in (stuck[0].uncleanable_reason or "")
    # Repaired and cleaned by a forced pass: the record is cleared in the same commit.
    victim.write_bytes(original)
    repaired = maintenance.run_pass(force=True, now_ms=T0 + 4)
    assert {o.partition: o.committed for o in repaired.outcomes}[0]
    assert ("t", 0) not in maintenance.uncleanable
    cleared = {p.partition: p for p in collect_status(config, ask_broker=False)[0][0].partitions}
    assert cleared[0].uncleanable_since_ms is None and cleared[0].uncleanable_reason is None


@pytest.mark.parametrize("rate", [2_000.0])
def test_throttler_holds_io_to_the_configured_rate(rate: float) -> None:
    throttle = Throttler(rate)
    started = time.monotonic()
    for _ in range(4):
        throttle.add(250)
    assert time.monotonic() - started >= 1000 / rate * 0.95


@pytest.mark.parametrize("in_flight", [False, True])
def test_a_deadline_topic_sweeps_orphans_past_the_grace_only_when_nothing_is_in_flight(
        tmp_path: Path, in_flight: bool) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=20,
                            min_cleanable_dirty_ratio=0.01, max_compaction_lag_ms=60_000,
                            vacuum_grace_ms=1000)
    append(config, "t", 0, [(i, b"k", b"v" * 10, T0) for i in range(4)], now_ms=T0)
    root = Path(topic_paths(config.lake_path, "t").log)
    orphan = root / "partition=0" / "segment=0" / "left-by-a-killed-pass.parquet"
    orphan.write_bytes(b"superseded values")
    ten_seconds_ago = time.time() - 10
    os.utime(orphan, (ten_seconds_ago, ten_seconds_ago))
    maintenance = LogMaintenance(None, config, nothing_in_flight=lambda: not in_flight)
    maintenance.vacuum._vacuum._last_full[str(root)] = time.monotonic()  # the hourly sweep ran
    first = maintenance.run_pass(now_ms=T0 + 1)  # cleans: removes files, within their grace
    assert orphan.exists() == in_flight
    assert first.vacuumed == (0 if in_flight else 1)
    time.sleep(1.1)  # the removed files pass the grace
    assert maintenance.run_pass(now_ms=T0 + 1).vacuumed == len(first.cleaned[0].result.removed)
    assert maintenance.run_pass(now_ms=T0 + 1).vacuumed == 0  # nothing is counted twice


def test_records_without_timestamps_count_as_written_when_their_file_was(tmp_path: Path) -> None:
    """Kafka's -1 (no timestamp, message format v0): retention and rolls use the file's write
    time, as Kafka uses a segment file's modification time, instead of expiring at once."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact,delete",
                            retention_ms=3_600_000, segment_ms=60_000, segment_bytes=40,
                            min_cleanable_dirty_ratio=0.01)
    now = int(time.time() * 1000)
    # 20-byte records, two to a segment: segments [0, 1], [2, 3], [4] (active).
    append(config, "t", 0, [(i, b"k%d" % (i % 2), b"v" * 18, -1) for i in range(5)], now)
    before = log_rows(config, "t")
    maintenance = LogMaintenance(None, config)
    maintenance.run_pass(now_ms=now + 1_000)
    kept = log_rows(config, "t")
    # Compacted (k0's 0 and k1's 1 superseded), nothing expired: before the fix the files'
    # latest timestamp, -1, made both closed segments expire at once, leaving [4].
    assert [r[1] for r in before] == [0, 1, 2, 3, 4]
    assert [r[1] for r in kept] == [2, 3, 4]
    # Past retention.ms after the files were written, time retention removes them (the last
    # segment too: it rolled by time long before).
    maintenance.run_pass(now_ms=now + 3_600_000 + 120_000)
    assert log_rows(config, "t") == []


def _interleave(monkeypatch, before_cleaning) -> None:
    """Run ``before_cleaning`` once, after a pass planned and before its task cleans: the
    window in which another writer commits to the log (two processes, as with
    ``compactor clean`` beside ``compactor run``)."""
    import compactor.cleaner.maintenance as maintenance_module

    real = maintenance_module.clean_partition
    pending = [before_cleaning]

    def clean(plan):
        while pending:
            pending.pop()()
        return real(plan)

    monkeypatch.setattr(maintenance_module, "clean_partition", clean)


def _latest(rows) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for _p, offset, key, value, *_ in sorted(rows, key=lambda r: r[1]):
        out[key] = (offset, value)
    return out


def test_a_pass_another_cleaner_overtook_is_dropped_and_the_next_one_replans(
        tmp_path: Path, monkeypatch) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=30,
                            min_cleanable_dirty_ratio=0.01)
    records = [(i, b"k%d" % (i % 3), b"v%d" % i, T0 + i) for i in range(12)]
    append(config, "t", 0, records, now_ms=T0 + 20)
    expected = _latest([(0, o, k, v) for o, k, v, _ in records])
    other = LogMaintenance(None, config)
    _interleave(monkeypatch, lambda: other.run_pass(force=True, now_ms=T0 + 1_000))
    mine = LogMaintenance(None, config)
    report = mine.run_pass(force=True, now_ms=T0 + 1_000)
    assert report.outcomes and not any(o.committed for o in report.outcomes)  # dropped
    rows = log_rows(config, "t")
    offsets = [r[1] for r in rows]
    assert len(offsets) == len(set(offsets)) and len(rows) < len(records)
    assert {k: v for k, v in _latest(rows).items()} == expected
    again = mine.run_pass(force=True, now_ms=T0 + 2_000)
    assert not any(o.result is not None and o.result.error for o in again.outcomes)
    assert _latest(log_rows(config, "t")) == expected


def test_an_ingest_commit_during_a_pass_lands_and_so_does_the_pass(
        tmp_path: Path, monkeypatch) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=30,
                            min_cleanable_dirty_ratio=0.01)
    first = [(i, b"k%d" % (i % 3), b"v%d" % i, T0 + i) for i in range(12)]
    later = [(i, b"k%d" % (i % 5), b"w%d" % i, T0 + i) for i in range(12, 20)]
    append(config, "t", 0, first, now_ms=T0 + 20)
    _interleave(monkeypatch, lambda: append(config, "t", 0, later, now_ms=T0 + 30))
    report = LogMaintenance(None, config).run_pass(force=True, now_ms=T0 + 1_000)
    assert any(o.committed for o in report.outcomes)
    rows = log_rows(config, "t")
    assert {r[1] for r in rows} >= {o for o, *_ in later}  # every ingested record is there
    assert _latest(rows) == _latest([(0, o, k, v) for o, k, v, _ in first + later])


def test_every_commit_names_what_it_did_in_commit_info(tmp_path: Path) -> None:
    """Delta readers see WRITE for every delta-rs commit: ours say what they did too."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact,delete", segment_ms=1000,
                            min_cleanable_dirty_ratio=0.01, retention_ms=60_000)
    keys = [b"k0", b"k1", b"k0", b"k1"]
    append(config, "t", 0, [(i, k, b"v%d" % i, T0 + 2000 * i) for i, k in enumerate(keys)],
           now_ms=T0 + 10_000)
    LogMaintenance(None, config).run_pass(now_ms=T0 + 10_500)  # compacts offsets 0 and 1 away
    LogMaintenance(None, config).run_pass(now_ms=T0 + 200_000)  # every segment past retention
    history = DeltaTable(topic_paths(config.lake_path, "t").log).history()
    ops = [h.get("compactor.operation") for h in reversed(history)
           if h["operation"] in ("WRITE", "MERGE")]  # not CREATE TABLE, SET TBLPROPERTIES
    assert None not in ops, history
    assert "INGEST" in ops and "CLEAN" in ops and "RETENTION" in ops, ops
    assert all(h["userMetadata"].startswith("compactor: ") for h in history
               if h.get("compactor.operation")), history


def test_a_tombstone_past_its_horizon_stays_until_the_latest_value_table_merged_it(
        tmp_path: Path) -> None:
    from compactor.lake.latest_table import catch_up

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=20,
                            min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000)
    append(config, "t", 0, [(0, b"gone", b"secret", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)  # the table holds the secret
    append(config, "t", 0, [(1, b"gone", None, T0 + 1), (2, b"other", b"x" * 20, T0 + 2)],
           now_ms=T0 + 2)
    LogMaintenance(None, config).run_pass(now_ms=T0 + 10)  # drops offset 0, stamps offset 1
    # The table merges on a cadence and has not read the tombstone when its horizon passes:
    # dropping it now would leave the secret in the table for ever.
    LogMaintenance(None, config).run_pass(now_ms=T0 + 5000)
    assert [(o, k, v) for _, o, k, v, _ in log_rows(config, "t")] == [
        (1, b"gone", None), (2, b"other", b"x" * 20)]
    catch_up(config.lake_path, "t", config.storage)
    table = DeltaTable(topic_paths(config.lake_path, "t").table).to_pyarrow_table()
    assert table.column("key").to_pylist() == [b"other"]
    LogMaintenance(None, config).run_pass(now_ms=T0 + 6000)  # now it may go
    assert [o for _, o, *_ in log_rows(config, "t")] == [2]


def test_a_record_dated_far_ahead_does_not_hold_cleaning_back(tmp_path: Path) -> None:
    """min.compaction.lag.ms counts a record dated ahead of the mirror's clock as written when
    its file was: one record dated 2100 no longer keeps its segment, and every later one,
    uncleanable (and their tombstones past their deadline) until 2100; status says why a
    partition is held."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact", segment_bytes=40,
                            min_compaction_lag_ms=1000, max_compaction_lag_ms=5000,
                            min_cleanable_dirty_ratio=0.01)
    y2100, now = 4_102_444_800_000, int(time.time() * 1000)
    # 20-byte records, two to a segment: [0, 1] [2, 3] [4] (active).
    append(config, "t", 0, [(0, b"k0", b"v" * 18, y2100), (1, b"a1", b"v" * 18, now),
                            (2, b"k0", b"w" * 18, now), (3, b"a1", None, now),
                            (4, b"k9", b"x" * 18, now)], now_ms=now)
    written = int(time.time() * 1000)  # the files' write time, at the latest
    held = collect_status(config, now_ms=now + 500)[0][0].partitions[0]
    assert held.first_uncleanable_offset == 0 and held.cleaning_held_by is not None
    assert "min.compaction.lag.ms=1000: segment 0" in held.cleaning_held_by
    LogMaintenance(None, config).run_pass(now_ms=written + 5_001)
    assert [r[1] for r in log_rows(config, "t")] == [2, 3, 4]  # k0's and a1's old values gone
    after = collect_status(config, now_ms=written + 5_001)[0][0].partitions[0]
    assert after.cleaning_held_by is None
