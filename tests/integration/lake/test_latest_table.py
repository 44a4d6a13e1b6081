"""The latest-value table, kept by MERGE from the log (real Delta tables, no broker)."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from compactor.lake.latest_table import catch_up
from compactor.lake.layout import topic_paths
from tests.lake import append, offline_config

T0 = 1_700_000_000_000


def table_rows(config, topic: str) -> dict[bytes, tuple[bytes, int, int]]:
    t = DeltaTable(topic_paths(config.lake_path, topic).table).to_pyarrow_table()
    return {r["key"]: (r["value"], r["partition"], r["offset"]) for r in t.to_pylist()}


def test_one_row_per_live_key_and_tombstones_delete(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"a", b"a1", T0), (1, b"b", b"b1", T0), (2, b"a", b"a2", T0),
                            (3, b"c", b"c1", T0)], now_ms=T0)
    stats = catch_up(config.lake_path, "t", config.storage)
    assert stats.keys == 3 and stats.inserted == 3
    assert table_rows(config, "t") == {b"a": (b"a2", 0, 2), b"b": (b"b1", 0, 1),
                                       b"c": (b"c1", 0, 3)}
    append(config, "t", 0, [(4, b"b", None, T0), (5, b"c", b"c2", T0), (6, b"d", None, T0)],
           now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert table_rows(config, "t") == {b"a": (b"a2", 0, 2), b"c": (b"c2", 0, 5)}


def test_within_a_partition_the_offset_wins_even_against_an_older_timestamp(
        tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"k", b"new-ts", T0 + 5000), (1, b"k", b"old-ts", T0)],
           now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert table_rows(config, "t")[b"k"][0] == b"old-ts"


def test_across_partitions_the_latest_timestamp_wins(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"k", b"p0-later", T0 + 10)], now_ms=T0)
    append(config, "t", 1, [(0, b"k", b"p1-earlier", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert table_rows(config, "t")[b"k"] == (b"p0-later", 0, 0)
    append(config, "t", 1, [(1, b"k", b"p1-latest", T0 + 20)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert table_rows(config, "t")[b"k"] == (b"p1-latest", 1, 1)


def test_a_lagging_table_catches_up_exactly_once(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    # Two log commits whose MERGE never ran (a crash after each log commit).
    append(config, "t", 0, [(0, b"a", b"1", T0), (1, b"a", b"2", T0)], now_ms=T0)
    append(config, "t", 0, [(2, b"b", b"3", T0), (3, b"a", None, T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert table_rows(config, "t") == {b"b": (b"3", 0, 2)}
    path = topic_paths(config.lake_path, "t").table
    version = DeltaTable(path).version()
    assert DeltaTable(path).transaction_version("compactor-table-0") == 3
    assert catch_up(config.lake_path, "t", config.storage).keys == 0
    assert DeltaTable(path).version() == version  # nothing new: no commit


def test_no_key_bytes_in_the_table_delta_log(tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"SECRET-KEY", b"SECRET-VALUE", T0),
                            (1, b"SECRET-KEY", None, T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    log_dir = Path(topic_paths(config.lake_path, "t").table) / "_delta_log"
    for f in log_dir.iterdir():
        assert b"SECRET" not in f.read_bytes(), f.name


def test_a_key_that_moved_partition_loses_its_older_values_in_the_old_one(
        tmp_path: Path) -> None:
    """The erasure promise is per key: once the key's newest record is a tombstone in another
    partition (partitions were added), its values in the old one go from the log; a newer
    value in another partition erases nothing (Kafka keeps both)."""
    from tests.lake import log_rows

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 1, [(0, b"k", b"secret", T0), (1, b"other", b"o", T0),
                            (2, b"k", b"secret-2", T0 + 1)], now_ms=T0)
    # The table's row of k is in partition 1.
    catch_up(config.lake_path, "t", config.storage, erase_moved=True)
    append(config, "t", 0, [(0, b"k", None, T0 + 10)], now_ms=T0)  # k's tombstone, moved
    stats = catch_up(config.lake_path, "t", config.storage, erase_moved=True)
    assert stats.moved_values == 2
    assert [r for r in log_rows(config, "t") if r[2] == b"k"] == [(0, 0, b"k", None, None)]
    assert b"k" not in table_rows(config, "t") and b"other" in table_rows(config, "t")
    # A newer value in another partition: both stay, the table holds the newer.
    append(config, "t", 1, [(3, b"j", b"old", T0 + 20)], now_ms=T0)
    append(config, "t", 0, [(1, b"j", b"new", T0 + 30)], now_ms=T0)
    assert catch_up(config.lake_path, "t", config.storage, erase_moved=True).moved_values == 0
    assert [r[3] for r in log_rows(config, "t") if r[2] == b"j"] == [b"new", b"old"]
    assert table_rows(config, "t")[b"j"] == (b"new", 0, 1)
    # Then j's tombstone, in the same range as a late older value in partition 1: both of
    # j's values in partition 1 go.
    append(config, "t", 1, [(4, b"j", b"late", T0 + 25)], now_ms=T0)
    append(config, "t", 0, [(2, b"j", None, T0 + 40)], now_ms=T0)
    assert catch_up(config.lake_path, "t", config.storage, erase_moved=True).moved_values == 2
    assert [r[:4] for r in log_rows(config, "t") if r[2] == b"j"] == [
        (0, 1, b"j", b"new"), (0, 2, b"j", None)]
    assert catch_up(config.lake_path, "t", config.storage, erase_moved=True).moved_values == 0


def test_a_range_that_changes_no_row_still_moves_the_position(tmp_path: Path) -> None:
    """A MERGE that changes nothing (tombstones of keys the table lacks) commits nothing in
    delta-rs; the position must move all the same, or the range is read again each time."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"never-seen", None, T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    path = topic_paths(config.lake_path, "t").table
    assert DeltaTable(path).transaction_version("compactor-table-0") == 0
    assert catch_up(config.lake_path, "t", config.storage).records == 0


def test_merges_of_new_keys_leave_few_files_and_every_row(tmp_path: Path) -> None:
    """A MERGE that only inserts adds a file; past COMPACT_AT_FILES small ones the catch-up
    rewrites them as few, rows unchanged, in a commit readers see as no data change."""
    import json

    from compactor.lake import latest_table, operations

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    merges = 2 * latest_table.COMPACT_AT_FILES + 3
    replaced = 0
    for i in range(merges):
        append(config, "t", 0, [(i, b"k%d" % i, b"v%d" % i, T0)], now_ms=T0)
        replaced += catch_up(config.lake_path, "t", config.storage).compacted
    path = topic_paths(config.lake_path, "t").table
    table = DeltaTable(path)
    assert len(table.file_uris()) <= latest_table.COMPACT_AT_FILES
    assert replaced >= latest_table.COMPACT_AT_FILES
    assert table_rows(config, "t") == {b"k%d" % i: (b"v%d" % i, 0, i) for i in range(merges)}
    compactions = [c for c in table.history()
                   if c.get(operations.OPERATION_KEY) == operations.COMPACT_TABLE]
    assert len(compactions) == 2
    for version in range(table.version() + 1):
        commit = Path(path, "_delta_log", f"{version:020d}.json").read_text().splitlines()
        actions = [json.loads(line) for line in commit]
        if any(operations.COMPACT_TABLE in json.dumps(a.get("commitInfo", {})) for a in actions):
            assert all(not a[kind]["dataChange"] for a in actions for kind in ("add", "remove")
                       if kind in a)


def test_new_keys_are_appended_and_a_held_key_is_merged(tmp_path: Path) -> None:
    """A range none of whose keys the table holds is one append commit (tombstones of keys
    never seen change nothing); one held key makes it a MERGE; both move the positions."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    path = topic_paths(config.lake_path, "t").table
    append(config, "t", 0, [(0, b"a", b"a1", T0), (1, b"b", b"b1", T0), (2, b"gone", None, T0)],
           now_ms=T0)
    append(config, "t", 1, [(0, b"c", b"c1", T0)], now_ms=T0)
    stats = catch_up(config.lake_path, "t", config.storage)
    assert (stats.inserted, stats.updated, stats.deleted) == (3, 0, 0)
    assert DeltaTable(path).history(1)[0]["operation"] == "WRITE"
    append(config, "t", 0, [(3, b"d", b"d1", T0), (4, b"e", None, T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert DeltaTable(path).history(1)[0]["operation"] == "WRITE"
    assert table_rows(config, "t") == {b"a": (b"a1", 0, 0), b"b": (b"b1", 0, 1),
                                       b"c": (b"c1", 1, 0), b"d": (b"d1", 0, 3)}
    # One key the table holds (b's tombstone) among new ones: a MERGE, which deletes it.
    append(config, "t", 0, [(5, b"f", b"f1", T0), (6, b"b", None, T0)], now_ms=T0)
    stats = catch_up(config.lake_path, "t", config.storage)
    assert (stats.inserted, stats.deleted) == (1, 1)
    assert DeltaTable(path).history(1)[0]["operation"] == "MERGE"
    assert table_rows(config, "t") == {b"a": (b"a1", 0, 0), b"c": (b"c1", 1, 0),
                                       b"d": (b"d1", 0, 3), b"f": (b"f1", 0, 5)}
    table = DeltaTable(path)
    assert (table.transaction_version("compactor-table-0"),
            table.transaction_version("compactor-table-1")) == (6, 0)


def test_an_append_is_refused_when_a_commit_moved_its_positions_since(tmp_path: Path) -> None:
    """The keys were read at one version; a commit since that moved the same position (a
    rebuild's reset, another catch-up) makes delta-rs refuse the append: nothing is written
    twice, and the next catch-up starts again from what was committed."""
    import pyarrow as pa
    import pytest

    from compactor.kafka.schema import KAFKA_SCHEMA
    from compactor.lake import operations
    from compactor.lake.new_keys import append_new, holds_any
    from compactor.positions import TABLE

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    path = topic_paths(config.lake_path, "t").table
    append(config, "t", 0, [(0, b"a", b"a1", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    stale = DeltaTable(path)
    source = stale.to_pyarrow_dataset().to_table().select(KAFKA_SCHEMA.names)
    source = source.set_column(0, "key", pa.array([b"z"], pa.binary()))
    assert not holds_any(stale, source.column("key"), config.storage)
    assert holds_any(stale, pa.array([b"a"], pa.binary()), config.storage)
    append(config, "t", 0, [(1, b"y", b"y1", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)  # moves compactor-table-0 to 1
    props = operations.properties(operations.MERGE_LATEST, "test", [TABLE.moved_to(5, 0)])
    with pytest.raises(Exception, match="(?i)concurrent"):
        append_new(stale, source.cast(KAFKA_SCHEMA), props)
    assert set(table_rows(config, "t")) == {b"a", b"y"}
    assert DeltaTable(path).transaction_version("compactor-table-0") == 1


def test_after_a_held_key_the_next_catch_ups_merge_without_reading_keys(
        tmp_path: Path) -> None:
    """A topic that updates keys would read them beside every MERGE: after a held key, the
    next MERGES_WITHOUT_LOOKING catch-ups MERGE (correctly) without reading, then one
    reads again and appends new keys."""
    from compactor.lake.new_keys import MERGES_WITHOUT_LOOKING

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    path = topic_paths(config.lake_path, "t").table
    append(config, "t", 0, [(0, b"k", b"v0", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    append(config, "t", 0, [(1, b"k", b"v1", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert DeltaTable(path).history(1)[0]["operation"] == "MERGE"
    offset = 2
    for _ in range(MERGES_WITHOUT_LOOKING):
        append(config, "t", 0, [(offset, b"new%d" % offset, b"n", T0)], now_ms=T0)
        catch_up(config.lake_path, "t", config.storage)
        assert DeltaTable(path).history(1)[0]["operation"] == "MERGE"
        offset += 1
    append(config, "t", 0, [(offset, b"new%d" % offset, b"n", T0)], now_ms=T0)
    catch_up(config.lake_path, "t", config.storage)
    assert DeltaTable(path).history(1)[0]["operation"] == "WRITE"
    assert table_rows(config, "t") == {
        b"k": (b"v1", 0, 1), **{b"new%d" % o: (b"n", 0, o) for o in range(2, offset + 1)}}
