"""Small log files encoded by compactor.lake.parquet_encoder, read back by Arrow and by DuckDB
(a Parquet reader of its own) against the rows and the schema Arrow's writer gives."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.exceptions import LakeError
from compactor.lake.datafiles import NON_PII_STATS, parquet_options
from compactor.lake.parquet_encoder import encodable, encode_files
from tests.unit.lake.test_datafiles import FILE_SCHEMA

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
_binary = st.none() | st.binary(max_size=12)
_header = st.none() | st.fixed_dictionaries(
    {"key": st.none() | st.text(max_size=5), "value": _binary})
_row = st.fixed_dictionaries({
    "key": _binary, "value": _binary, "topic": st.none() | st.text(max_size=6),
    "offset": st.none() | st.integers(-2**63, 2**63 - 1),
    "timestamp": st.none() | st.integers(-2**62, 2**62),
    "timestampType": st.none() | st.integers(-2**31, 2**31 - 1),
    "headers": st.none() | st.lists(_header, max_size=4),
    "deleteHorizonMs": st.none() | st.integers(-2**63, 2**63 - 1),
})


def _check(table: pa.Table, starts: list[int]) -> list[bytes]:
    """Encode ``table`` as files starting at ``starts``; each reads back as its rows with the
    schema Arrow's own file of them has, and with Parquet statistics of non-PII columns only,
    as Arrow writes them."""
    files = encode_files(table, starts, NON_PII_STATS)
    ends = [*starts[1:], table.num_rows]
    assert len(files) == len(starts)
    for data, start, end in zip(files, starts, ends, strict=True):
        rows = table.slice(start, end - start)
        sink = pa.BufferOutputStream()
        pq.write_table(rows, sink, **parquet_options(rows.schema, 1))
        arrow = pq.ParquetFile(pa.BufferReader(sink.getvalue()))
        ours = pq.ParquetFile(pa.BufferReader(data))
        assert ours.schema_arrow == rows.schema
        assert ours.schema.equals(arrow.schema)
        assert ours.read().equals(rows)
        mine, theirs = ours.metadata.row_group(0), arrow.metadata.row_group(0)
        assert mine.num_rows == end - start
        for i in range(mine.num_columns):
            a, b = mine.column(i), theirs.column(i)
            assert (a.path_in_schema, a.num_values, a.is_stats_set) == \
                (b.path_in_schema, b.num_values, b.is_stats_set)
            if a.is_stats_set:
                assert (a.statistics.has_min_max, a.statistics.null_count) == \
                    (b.statistics.has_min_max, b.statistics.null_count)
                if a.statistics.has_min_max:
                    assert (a.statistics.min_raw, a.statistics.max_raw) == \
                        (b.statistics.min_raw, b.statistics.max_raw)
    return files


def test_every_shape_of_headers_and_nulls_reads_back_as_written(tmp_path: Path) -> None:
    """Null, empty and long header lists, null elements, keys and values, empty strings and
    a file of more than eight levels (bit-packed) each read back from their own file; DuckDB
    reads the same rows."""
    headers = [None, [], [{"key": "a", "value": b"1"}], [None, {"key": None, "value": None}],
               [{"key": "", "value": b""}] * 9, [{"key": "trace", "value": b"\x00\xff"}]]
    n = 24
    table = pa.table({
        "key": [None if i % 7 == 3 else b"k%d" % i for i in range(n)],
        "value": [None if i % 5 == 1 else b"" if i % 5 == 2 else b"v" * i for i in range(n)],
        "topic": ["t"] * n, "offset": list(range(100, 100 + n)),
        "timestamp": [1_700_000_000_000_000 + i for i in range(n)],
        "timestampType": [i % 2 for i in range(n)],
        "headers": pa.array([headers[i % len(headers)] for i in range(n)], pa.list_(HEADER)),
        "deleteHorizonMs": [None if i % 3 else 77 + i for i in range(n)],
    }, schema=FILE_SCHEMA)
    starts = [0, 1, 2, 5, 6, 18]
    files = _check(table, starts)
    path = tmp_path / "f.parquet"
    path.write_bytes(files[4])  # rows 6 to 17: every header shape, nulls in every column
    got = duckdb.sql(f"SELECT * FROM read_parquet('{path}')").arrow()
    got = got.read_all() if isinstance(got, pa.RecordBatchReader) else got
    want = table.slice(6, 12)
    assert got.column("headers").to_pylist() == want.column("headers").to_pylist()
    for name in ("key", "value", "topic", "offset", "timestampType", "deleteHorizonMs"):
        assert got.column(name).to_pylist() == want.column(name).to_pylist()
    assert got.column("timestamp").cast(pa.int64()).to_pylist() == \
        want.column("timestamp").cast(pa.int64()).to_pylist()


def test_a_slice_of_a_table_of_many_chunks_encodes_its_own_rows() -> None:
    rows = pa.table({"key": [b"a", None, b"c", b"d"], "offset": [1, 2, None, 4]})
    table = pa.concat_tables([rows, rows]).slice(3, 4)  # two chunks, offsets into buffers
    _check(table, [0, 2])


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, min_size=1, max_size=30), st.data())
def test_random_rows_read_back_as_written(rows: list[dict[str, object]],
                                          data: st.DataObject) -> None:
    table = pa.Table.from_pylist(rows, schema=FILE_SCHEMA)
    cuts = data.draw(st.sets(st.integers(1, max(1, len(rows) - 1)), max_size=4))
    _check(table, sorted({0} | {c for c in cuts if c < len(rows)}))


def test_what_is_not_encodable_is_refused_by_name() -> None:
    assert encodable(FILE_SCHEMA)
    for schema in (pa.schema([pa.field("offset", pa.int64(), nullable=False)]),
                   pa.schema([("ratio", pa.float64())]),
                   pa.schema([("at", pa.timestamp("ns", tz="UTC"))]),
                   pa.schema([("tags", pa.list_(pa.string()))])):
        assert not encodable(schema)
    with pytest.raises(LakeError, match=r"column 'ratio' \(double\) .* only nullable"):
        encode_files(pa.table({"ratio": [1.5]}), [0])
    with pytest.raises(LakeError, match="non-empty files"):
        encode_files(pa.table({"offset": [1, 2]}), [0, 2])
