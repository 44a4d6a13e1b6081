"""A complete table written as one data file (the micro-batch's path, made in memory) against
the same rows streamed through DataFileBuilder (the cleaner's path)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.datafiles import NON_PII_STATS, DataFileBuilder, write_data_file
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
