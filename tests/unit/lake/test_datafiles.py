"""A complete table written as one data file (the micro-batch's path, made in memory) against
the same rows streamed through DataFileBuilder (the cleaner's path)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.datafiles import (
    COMPRESS_FROM,
    NON_PII_STATS,
    DataFileBuilder,
    write_data_file,
    write_new,
)
from compactor.lake.storage import LOCAL

FILE_SCHEMA = pa.schema([*(f for f in KAFKA_SCHEMA if f.name != "partition"),
                         pa.field("deleteHorizonMs", pa.int64())])


def _rows(offsets: list[int]) -> pa.Table:
    now_ms = int(time.time() * 1000)
    n = len(offsets)
    return pa.table({
        "key": [b"k%d" % o for o in offsets], "value": [b"v" * 30] * n, "topic": ["t"] * n,
        "offset": offsets, "timestamp": [(now_ms + o) * 1000 for o in offsets],
        "timestampType": [0] * n, "headers": [[]] * n, "deleteHorizonMs": [None] * n,
    }, schema=FILE_SCHEMA)


def test_a_table_written_whole_matches_the_same_rows_streamed(tmp_path: Path) -> None:
    rows = _rows([7, 8, 9, 12])
    directory = "partition=3/segment=7"  # not there yet: the first file of a segment
    whole = write_data_file(str(tmp_path / "a"), directory, rows, 120, "log",
                            {"partition": "3", "segment": "7"}, storage=LOCAL)
    builder = DataFileBuilder(str(tmp_path / "b"), directory, "log",
                              {"partition": "3", "segment": "7"}, storage=LOCAL)
    builder.write(rows.slice(0, 2), 60)
    builder.write(rows.slice(2), 60)
    streamed = builder.close()
    assert streamed is not None

    assert (whole.table, whole.records, whole.record_bytes, whole.stats, whole.newest_ms,
            dict(whole.partition_values)) == (
        streamed.table, streamed.records, streamed.record_bytes, streamed.stats,
        streamed.newest_ms, dict(streamed.partition_values))
    assert whole.path.startswith(f"{directory}/00000000000000000007-00000000000000000012.120b.")
    written = tmp_path / "a" / whole.path
    assert written.stat().st_size == whole.size
    assert [p.name for p in written.parent.iterdir()] == [written.name]  # no temporary file
    assert pq.read_table(written).equals(rows)
    for path in (written, tmp_path / "b" / streamed.path):  # Parquet statistics: no PII
        meta = pq.ParquetFile(path).metadata.row_group(0)
        with_stats = {meta.column(i).path_in_schema for i in range(meta.num_columns)
                      if meta.column(i).is_stats_set}
        assert with_stats <= set(NON_PII_STATS) and "offset" in with_stats


def test_small_batches_streamed_are_one_row_group_and_counted_once(tmp_path: Path) -> None:
    """The cleaner streams what it read file by file: gathered into one row group, each
    batch's record bytes given or counted from its rows."""
    from compactor.lake.segments import record_sizes

    rows = _rows(list(range(40)))
    builder = DataFileBuilder(str(tmp_path), "partition=0/segment=0", "log",
                              {"partition": "0", "segment": "0"}, storage=LOCAL)
    for i in range(0, 40, 2):
        part = rows.slice(i, 2)
        builder.write(part, int(record_sizes(part).sum()) if i % 4 else None)
    written = builder.close()
    assert written is not None
    path = tmp_path / written.path
    assert pq.ParquetFile(path).num_row_groups == 1
    assert pq.read_table(path).equals(rows)
    assert written.record_bytes == int(record_sizes(rows).sum()) > 0
    assert written.records == 40


def test_a_few_records_are_written_uncompressed_and_more_as_zstd(tmp_path: Path) -> None:
    """zstd would not shrink a one-record file of a quiet partition and costs a compressor per
    column; a file of more record bytes is compressed."""
    codecs = {}
    for n, record_bytes in ((1, 60), (2000, COMPRESS_FROM)):
        rows = _rows(list(range(n)))
        written = write_data_file(str(tmp_path / str(n)), "partition=0/segment=0", rows,
                                  record_bytes, "log", {"partition": "0", "segment": "0"},
                                  storage=LOCAL)
        path = tmp_path / str(n) / written.path
        assert pq.read_table(path).equals(rows)
        meta = pq.ParquetFile(path).metadata.row_group(0)
        codecs[n] = {meta.column(i).compression for i in range(meta.num_columns)}
    assert codecs == {1: {"UNCOMPRESSED"}, 2000: {"ZSTD"}}


def test_statistics_match_arrows_for_negative_null_and_mixed_columns() -> None:
    import json

    import pyarrow.compute as pc

    from compactor.lake.datafiles import file_stats

    rows = _rows([3, 1, 2, 9])
    stamps = pa.array([-1_500, 2_999, None, -1], pa.int64()).cast(FILE_SCHEMA.field(
        "timestamp").type)  # before 1970 (Kafka's -1 ms: no timestamp), and a null
    horizons = pa.array([None, 40, None, 7], pa.int64())
    rows = rows.set_column(rows.schema.get_field_index("timestamp"), "timestamp", stamps)
    rows = rows.set_column(rows.schema.get_field_index("deleteHorizonMs"), "deleteHorizonMs",
                           horizons)
    stats = json.loads(file_stats(rows))

    ms = pc.min_max(pc.divide(stamps.cast(pa.int64()), 1000))  # what Arrow's kernels give
    assert (ms["min"].as_py(), ms["max"].as_py()) == (-1, 2)
    assert stats["minValues"]["offset"] == 1 and stats["maxValues"]["offset"] == 9
    assert stats["minValues"]["deleteHorizonMs"] == 7
    assert stats["maxValues"]["deleteHorizonMs"] == 40
    assert stats["minValues"]["timestamp"] == "1969-12-31T23:59:59.999Z"  # -1 ms
    assert stats["maxValues"]["timestamp"] == "1970-01-01T00:00:00.002Z"
    assert stats["nullCount"] == {"offset": 0, "timestamp": 1, "deleteHorizonMs": 2}
    assert stats["numRecords"] == 4



@given(st.integers(-62_135_596_800_000 - 10**6, 253_402_300_799_999 + 10**6))
def test_timestamp_statistics_read_back_as_the_milliseconds_written(ms: int) -> None:
    """A file's timestamp statistic is written as Delta's ISO text (formatted a second at a
    time) and read back from a commit as the same milliseconds; beyond year 9999 there is
    none, as Python's datetime has none."""
    import datetime as dt

    from compactor.lake.datafiles import _iso_ms
    from compactor.lake.segments import _iso_ms as parsed

    try:
        stamp = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    except OverflowError:
        assert _iso_ms(ms) is None
        return
    text = _iso_ms(ms)
    assert text == (f"{stamp.year:04d}" + stamp.strftime("-%m-%dT%H:%M:%S.")
                    + f"{stamp.microsecond // 1000:03d}Z")
    assert parsed(text) == ms


def test_a_year_before_1000_is_written_with_four_digits_and_read_either_way() -> None:
    """Delta writes four digits of year; a statistic an older version of this writer left
    with fewer (glibc's %Y) reads back as the same milliseconds."""
    from compactor.lake.datafiles import _iso_ms
    from compactor.lake.segments import _iso_ms as parsed

    ms = -30_610_224_000_001  # 0999-12-31T23:59:59.999Z
    assert _iso_ms(ms) == "0999-12-31T23:59:59.999Z"
    assert parsed("0999-12-31T23:59:59.999Z") == ms
    assert parsed("999-12-31T23:59:59.999Z") == ms
    assert parsed("1-01-01T00:00:00.000Z") == -62_135_596_800_000


def test_a_new_file_is_made_with_its_folder_and_never_over_another(tmp_path: Path) -> None:
    """write_new makes a segment's first folder, and refuses a name that is already taken,
    leaving that file as it was."""
    final = tmp_path / "partition=1" / "segment=0" / "f.parquet"
    write_new(str(final), b"first")
    assert final.read_bytes() == b"first"
    with pytest.raises(FileExistsError):
        write_new(str(final), b"second")
    assert final.read_bytes() == b"first"


@pytest.mark.parametrize("stamps", [(-1_500, 2_999), (0, 0), (1_700_000_000_123, 1_700_000_009_999),
                                    (-62_135_596_800_001, 5), (253_402_300_800_000, 1)],
                         ids=["before-1970", "epoch", "now", "before-year-1", "after-9999"])
def test_statistics_are_what_json_dumps_writes(stamps: tuple[int, int]) -> None:
    """The statistics, formatted directly, are byte for byte json.dumps's, timestamps beyond
    Delta's range left out; their span states what they state."""
    import json

    from compactor.lake.datafiles import FileStats, _iso_ms

    stats = FileStats()
    stats.records, stats.nulls = 3, {"offset": 0, "timestamp": 1, "deleteHorizonMs": 2}
    stats.lo = {"offset": 4, "timestamp": min(stamps), "deleteHorizonMs": 7}
    stats.hi = {"offset": 90, "timestamp": max(stamps), "deleteHorizonMs": 8}
    iso = {bound: _iso_ms(value) for bound, value in (("lo", min(stamps)), ("hi", max(stamps)))}
    dated = None not in iso.values()
    expected = {"numRecords": 3,
                "minValues": {"offset": 4, **({"timestamp": iso["lo"]} if dated else {}),
                              "deleteHorizonMs": 7},
                "maxValues": {"offset": 90, **({"timestamp": iso["hi"]} if dated else {}),
                              "deleteHorizonMs": 8},
                "nullCount": stats.nulls}
    assert stats.json() == json.dumps(expected)
    assert stats.span() == (4, 90, min(stamps) if dated else None,
                            max(stamps) if dated else None, 7)
    assert FileStats().json() == json.dumps({"numRecords": 0, "minValues": {}, "maxValues": {},
                                             "nullCount": FileStats().nulls})
    assert FileStats().span() is None
