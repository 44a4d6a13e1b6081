"""A partition's records between two offsets, read from its files batch by batch."""

from __future__ import annotations

from pathlib import Path

from compactor.lake.layout import topic_paths
from compactor.lake.log_follower import log_view
from compactor.lake.range_reader import (
    TOMBSTONE_COLUMNS,
    iter_offsets,
    read_offsets,
    read_tombstones,
)
from tests.lake import append, offline_config

NOW = 1_700_000_000_000


def _log(tmp_path: Path):  # type: ignore[no-untyped-def]
    """60 records over three files: every 7th a tombstone; some keyless (a compacted topic
    sends those to the rejected table, so the log has gaps)."""
    config = offline_config(str(tmp_path / "lake"), "t", cleanup_policy="compact",
                            segment_bytes="400")
    for start in range(0, 60, 20):  # three micro-batches, so three commits and more files
        append(config, "t", 0, [
            (o, None if o % 11 == 5 else b"k%d" % (o % 9), None if o % 7 == 0 else b"v%d" % o,
             NOW + o) for o in range(start, start + 20)], now_ms=NOW)
    view = log_view(topic_paths(config.lake_path, "t").log, config.storage)
    assert view is not None
    return config, view.uri, view.partitions[0]


def test_a_range_is_exactly_the_offsets_after_its_start_up_to_its_end(tmp_path) -> None:
    config, uri, plog = _log(tmp_path)
    assert sum(len(s.files) for s in plog.segments) >= 3  # a range crosses files
    for after, upto in ((-1, 59), (4, 33), (19, 20), (30, 30), (59, 80)):
        offsets = [o for b in iter_offsets(uri, plog, after, upto, ["offset"], config.storage)
                   for o in b.column("offset").to_pylist()]
        assert offsets == [o for o in range(after + 1, min(upto, 59) + 1) if o % 11 != 5]
        table = read_offsets(uri, plog, after, upto, ["offset", "key"], config.storage)
        assert table.column("offset").to_pylist() == offsets
        assert set(table.column("partition").to_pylist()) <= {0}


def test_tombstones_are_the_keyed_null_values_and_carry_no_value(tmp_path) -> None:
    config, uri, plog = _log(tmp_path)
    found = read_tombstones(uri, plog, 6, 50, ["key", "offset", "timestamp"], config.storage)
    assert "value" not in found.column_names
    expected = [o for o in range(7, 51) if o % 7 == 0 and o % 11 != 5]
    assert found.column("offset").to_pylist() == expected
    assert found.column("key").to_pylist() == [b"k%d" % (o % 9) for o in expected]


def test_a_write_tasks_tombstones_are_those_its_files_hold(tmp_path) -> None:
    """The readers after a micro-batch take its tombstones from the write tasks; what they
    take must be what reading the files gives, and a reader behind the batch reads files."""
    config, _, _ = _log(tmp_path)
    records = [(o, None if o % 11 == 5 else b"k%d" % (o % 9), None if o % 3 == 0 else b"v",
                NOW + o) for o in range(60, 90)]
    (result,) = append(config, "t", 0, records, now_ms=NOW)
    written = result.tombstones
    assert written is not None and (written.after, written.upto) == (59, 89)
    view = log_view(topic_paths(config.lake_path, "t").log, config.storage)
    assert view is not None
    uri, plog = view.uri, view.partitions[0]

    def both(lo: int, columns: list[str]) -> tuple[list[object], list[object]]:
        kept = read_tombstones(uri, plog, lo, 89, columns, config.storage, written)
        read = read_tombstones(uri, plog, lo, 89, columns, config.storage)
        return kept.to_pylist(), read.to_pylist()

    for lo, columns in ((59, TOMBSTONE_COLUMNS), (70, TOMBSTONE_COLUMNS), (59, ["key"])):
        assert written.covers(lo, 89)
        kept, read = both(lo, columns)
        assert kept == read and kept  # keyless nulls are not tombstones (they are rejected)
    assert not written.covers(40, 89) and not written.covers(59, 80)
    kept, read = both(40, TOMBSTONE_COLUMNS)  # a reader behind the batch: the files
    assert kept == read and {42, 56, 63} <= {r["offset"] for r in read}
