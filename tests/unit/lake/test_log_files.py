"""A micro-batch's log files of many partitions written together, against each written alone."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compactor.exceptions import LakeError
from compactor.lake.datafiles import COMPRESS_FROM, NON_PII_STATS, write_data_file
from compactor.lake.log_files import (
    _TOGETHER_FROM,
    LogGroup,
    LogPart,
    write_log_files,
    write_log_rows,
    write_logs,
)
from compactor.lake.storage import LOCAL
from tests.unit.lake.test_datafiles import _rows


def test_log_files_written_together_match_each_written_alone(tmp_path: Path) -> None:
    """A micro-batch's small log files of many partitions go through one dataset write: names,
    statistics, sizes, compression and rows as one write_data_file each would give, in the
    order asked, with no temporary file left."""
    plain = [LogPart(p, 10 * p, _rows(list(range(10 * p, 10 * p + 1 + p % 3))), 60 + p)
             for p in range(_TOGETHER_FROM + 2)]
    plain.append(LogPart(99, 0, _rows(list(range(2000))), COMPRESS_FROM))  # zstd, alone
    stamped = _rows([5, 6])  # a cleaned file's horizons: statistics counted per file
    stamped = stamped.set_column(stamped.schema.get_field_index("deleteHorizonMs"),
                                 "deleteHorizonMs", pa.array([None, 77], pa.int64()))
    for case, parts in enumerate([plain, [*plain[:2], LogPart(7, 5, stamped, 50), *plain[2:]]]):
        _check_together(tmp_path / str(case), parts)


def _check_together(tmp_path: Path, parts: list) -> None:
    together = write_log_files(str(tmp_path / "a"), parts, storage=LOCAL)
    alone = [write_data_file(str(tmp_path / "b"), f"partition={p.partition}/segment={p.segment}",
                             p.table, p.record_bytes, "log",
                             {"partition": str(p.partition), "segment": str(p.segment)},
                             storage=LOCAL) for p in parts]
    assert len(together) == len(parts)
    for t, a, part in zip(together, alone, parts, strict=True):
        unique = t.path.rsplit(".", 2)[0]  # the name less its random part
        assert (unique, t.table, t.records, t.record_bytes, t.stats, t.newest_ms,
                dict(t.partition_values)) == (a.path.rsplit(".", 2)[0], a.table, a.records,
                                              a.record_bytes, a.stats, a.newest_ms,
                                              dict(a.partition_values))
        path = tmp_path / "a" / t.path
        assert path.stat().st_size == t.size
        assert [f.name for f in path.parent.iterdir()] == [path.name]  # no temporary file
        assert pq.read_table(path).equals(part.table)
        assert pq.read_schema(path) == pq.read_schema(tmp_path / "b" / a.path)
        meta = pq.ParquetFile(path).metadata
        assert meta.num_row_groups == 1
        with_stats = {meta.row_group(0).column(i).path_in_schema
                      for i in range(meta.num_columns) if meta.row_group(0).column(i).is_stats_set}
        assert with_stats <= set(NON_PII_STATS) and "offset" in with_stats
        codecs = {meta.row_group(0).column(i).compression for i in range(meta.num_columns)}
        assert codecs == ({"ZSTD"} if part.record_bytes >= COMPRESS_FROM else {"UNCOMPRESSED"})


def test_log_files_of_several_topics_written_together_land_in_their_own_logs(
        tmp_path: Path) -> None:
    """A write task's files of many topics, a few per topic, share one dataset write: each
    lands in its own topic's log with the name, statistics and rows it would have had alone,
    the same partition and segment in two logs included, with no temporary file left."""
    roots = [str(tmp_path / "lake" / name / "log") for name in ("orders", "orders.v2", "x-y")]
    parts = [(roots[i % 3], LogPart(i // 3, 0, _rows([100 * i, 100 * i + 1]), 40 + i))
             for i in range(_TOGETHER_FROM + 5)]
    written = write_logs(parts, storage=LOCAL)
    assert len(written) == len(parts)
    for (root, part), f in zip(parts, written, strict=True):
        alone = write_data_file(str(tmp_path / "alone" / Path(root).parent.name),
                                f"partition={part.partition}/segment={part.segment}",
                                part.table, part.record_bytes, "log",
                                {"partition": str(part.partition), "segment": "0"},
                                storage=LOCAL)
        assert (f.path.rsplit(".", 2)[0], f.stats, f.records, dict(f.partition_values)) == (
            alone.path.rsplit(".", 2)[0], alone.stats, alone.records,
            dict(alone.partition_values))
        path = Path(root) / f.path
        assert pq.read_table(path).equals(part.table)
        assert [g.name for g in path.parent.iterdir()] == [path.name]
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == ["orders", "orders.v2", "x-y"]


def test_groups_of_rows_across_tables_are_written_as_their_parts_would_be(
        tmp_path: Path) -> None:
    """Row groups taken in turn from a few tables (one table of many small groups, then
    tables of one group, one of them compressed) give each group's file as its own part
    would; groups that do not match the rows given are refused before anything is written."""
    shared = [_rows(list(range(100 * i, 100 * i + 2))) for i in range(_TOGETHER_FROM + 3)]
    alone = [_rows(list(range(5000, 5003))), _rows(list(range(6000, 8000)))]
    root = str(tmp_path / "rows" / "log")
    groups = [LogGroup(root, i, 0, 2, 50 + i) for i in range(len(shared))] + [
        LogGroup(root, 90, 5, 3, 70), LogGroup(root, 91, 6, 2000, COMPRESS_FROM)]
    written = write_log_rows([pa.concat_tables(shared), *alone], groups, storage=LOCAL)
    parts = [LogPart(g.partition, g.segment, t, g.record_bytes)
             for g, t in zip(groups, [*shared, *alone], strict=True)]
    expected = write_log_files(str(tmp_path / "parts" / "log"), parts, storage=LOCAL)
    assert [(f.path.rsplit(".", 2)[0], f.stats, f.records, f.record_bytes) for f in written] \
        == [(f.path.rsplit(".", 2)[0], f.stats, f.records, f.record_bytes) for f in expected]
    for f, part in zip(written, parts, strict=True):
        assert pq.read_table(Path(root) / f.path).equals(part.table)

    refused = str(tmp_path / "refused" / "log")
    with pytest.raises(LakeError, match="do not hold"):
        write_log_rows([shared[0]], [LogGroup(refused, 1, 0, 3, 10)], storage=LOCAL)
    with pytest.raises(LakeError, match="not all in one table"):
        write_log_rows(shared[:2], [LogGroup(refused, 1, 0, 1, 10),
                                    LogGroup(refused, 2, 0, 3, 10)], storage=LOCAL)
    assert not (tmp_path / "refused").exists()
