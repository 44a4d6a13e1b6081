"""Small Parquet files encoded here, many at once, instead of by Arrow's writer one by one.

A micro-batch over many partitions writes one small file per partition with records, and
Arrow's writer spends most of such a file's time on its own set-up. Here the rows of all the
files are encoded column by column in one vectorised pass
(:mod:`compactor.lake.parquet_columns`), and each file is then slices of those bytes between
page headers and a footer made of pre-encoded pieces. The files are plain Parquet: one row
group, format 1 data pages, PLAIN values, RLE or bit-packed levels, no compression, column
orders, and Arrow's own schema in their metadata, so Arrow reads back exactly the types it
would have written and every Parquet reader reads them.

Only nullable columns of the types the log holds are encoded here (binary, string, int32,
int64, timestamp in ms or us, and a list of structs of binary, string, int32 and int64, as
Kafka's headers are): :func:`encodable` says whether a schema is; Arrow writes the rest.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from compactor.exceptions import LakeError
from compactor.lake import parquet_columns as cols
from compactor.lake import thrift_compact as tc

_CREATED_BY = b"kafka-lake-compactor plain pages"
_MAGIC = b"PAR1"

# Parquet's enums (parquet.thrift).
_INT32, _INT64, _BYTE_ARRAY = 1, 2, 6
_OPTIONAL, _REPEATED = 1, 2
_UTF8, _LIST, _TIMESTAMP_MILLIS, _TIMESTAMP_MICROS = 0, 3, 9, 10
_PLAIN, _RLE = 0, 3
# (physical type, value width: 0 for byte arrays) of each flat type.
_FLAT = {"binary": (_BYTE_ARRAY, 0), "string": (_BYTE_ARRAY, 0), "int32": (_INT32, 4),
         "int64": (_INT64, 8)}


def _flat(t: pa.DataType) -> tuple[int, int] | None:
    if pa.types.is_timestamp(t):
        return (_INT64, 8) if t.unit in ("ms", "us") else None
    return _FLAT.get(str(t))


def _fits(f: pa.Field) -> bool:
    t = f.type
    if pa.types.is_list(t) and pa.types.is_struct(t.value_type):
        return f.nullable and t.value_field.nullable and all(
            c.nullable and str(c.type) in _FLAT for c in t.value_type)
    return f.nullable and _flat(t) is not None


def _refusal(schema: pa.Schema) -> str | None:
    """Why :func:`encode_files` cannot encode tables of ``schema``; None when it can."""
    unfit = next((f for f in schema if not _fits(f)), None)
    if unfit is None and len(schema):
        return None
    what = "no column" if unfit is None else \
        f"column {unfit.name!r} ({unfit.type}{'' if unfit.nullable else ', not null'})"
    return (f"cannot encode {what} as plain Parquet pages: only nullable binary, string, "
            "int32, int64 and timestamp (ms, us) columns and lists of structs of the first "
            "four are")


def encodable(schema: pa.Schema) -> bool:
    """Whether :func:`encode_files` encodes tables of ``schema``."""
    return _refusal(schema) is None


@dataclass(frozen=True)
class _Leaf:
    """A leaf column of the schema."""

    width: int  # bytes of a value; 0 for byte arrays
    bits: int  # of its definition levels
    stats: bool
    head: bytes  # its ColumnChunk up to its ColumnMetaData's codec, pre-encoded


@dataclass(frozen=True)
class _Layout:
    """What every file of one Arrow schema shares."""

    leaves: tuple[_Leaf, ...]
    footer_head: bytes  # FileMetaData's version and schema
    footer_tail: bytes  # its key-value metadata, created_by, column orders and its end


def _logical(th: tc.Struct, t: pa.DataType) -> None:
    """A flat column's converted and logical types (SchemaElement 6 and 10), as Arrow's."""
    if pa.types.is_string(t):
        th.number(6, _UTF8).begin(10).begin(1).end().end()
    elif isinstance(t, pa.TimestampType):
        if t.tz is not None:  # a converted type means an instant
            th.number(6, _TIMESTAMP_MICROS if t.unit == "us" else _TIMESTAMP_MILLIS)
        th.begin(10).begin(8).flag(1, t.tz is not None)
        th.begin(2).begin(2 if t.unit == "us" else 1).end().end().end().end()


def _element(name: str, repetition: int = _OPTIONAL, *, t: pa.DataType | None = None,
             children: int | None = None, as_list: bool = False) -> bytes:
    """One SchemaElement: a leaf of flat type ``t``, or a group of ``children``."""
    th = tc.Struct()
    if t is not None:
        th.number(1, _flat(t)[0])  # type: ignore[index]  # the schema is encodable
    th.number(3, repetition).binary(4, name.encode())
    if children is not None:
        th.number(5, children)
    if as_list:
        th.number(6, _LIST).begin(10).begin(3).end().end()
    elif t is not None:
        _logical(th, t)
    return th.end().encoded()


def _leaf(path: Sequence[str], t: pa.DataType, bits: int, stats: bool) -> _Leaf:
    physical, width = _flat(t)  # type: ignore[misc]  # the schema is encodable
    meta = tc.Struct().number(1, physical).sequence(2, tc.I32, [tc.zigzag(_RLE), tc.zigzag(_PLAIN)])
    meta.sequence(3, tc.BINARY, [tc.binary(p.encode()) for p in path]).number(4, 0)  # uncompressed
    # ColumnChunk: file_offset 0 (deprecated), then its ColumnMetaData.
    head = tc.field(2, tc.I64) + tc.zigzag(0) + tc.field(1, tc.STRUCT) + meta.encoded()
    return _Leaf(width, bits, stats, head)


@functools.lru_cache(maxsize=16)
def _layout(schema: pa.Schema, stats: frozenset[str]) -> _Layout:
    leaves: list[_Leaf] = []
    elements = [tc.Struct().binary(4, b"schema").number(5, len(schema)).end().encoded()]
    for f in schema:
        if pa.types.is_list(f.type):
            fields = list(f.type.value_type)
            elements += [_element(f.name, children=1, as_list=True),
                         _element("list", _REPEATED, children=1),
                         _element("element", children=len(fields))]
            for child in fields:
                elements.append(_element(child.name, t=child.type))
                leaves.append(_leaf((f.name, "list", "element", child.name), child.type, 3,
                                    False))
        else:
            elements.append(_element(f.name, t=f.type))
            leaves.append(_leaf((f.name,), f.type, 1, f.name in stats))
    head = tc.Struct().number(1, 1).sequence(2, tc.STRUCT, elements)
    kv = tc.Struct().binary(1, b"ARROW:schema").binary(2, _arrow_schema(schema)).end()
    order = tc.Struct().begin(1).end().end().encoded()  # TypeDefinedOrder
    tail = tc.Struct(after=4).sequence(5, tc.STRUCT, [kv.encoded()]).binary(6, _CREATED_BY)
    tail.sequence(7, tc.STRUCT, [order] * len(leaves)).end()
    return _Layout(tuple(leaves), head.encoded(), tail.encoded())


def _arrow_schema(schema: pa.Schema) -> bytes:
    """``schema`` serialised as Arrow's own Parquet writer stores it (``ARROW:schema``)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return bytes(pq.read_metadata(pa.BufferReader(sink.getvalue())).metadata[b"ARROW:schema"])


def _statistics(b: cols.Bounds, g: int, width: int) -> bytes:
    """A column chunk's Statistics: null count, and min and max (legacy and new alike, as
    for every signed integer) when a value is present."""
    nulls = tc.zigzag(b.nulls[g])
    if b.lo[g] > b.hi[g]:
        return tc.field(3, tc.I64) + nulls + b"\x00"
    fmt = "<q" if width == 8 else "<i"
    big, small = tc.binary(struct.pack(fmt, b.hi[g])), tc.binary(struct.pack(fmt, b.lo[g]))
    bin1 = tc.field(1, tc.BINARY)
    return b"".join((bin1, big, bin1, small, tc.field(1, tc.I64), nulls,
                     tc.field(2, tc.BINARY), big, bin1, small, b"\x00"))


def encode_files(table: pa.Table, starts: Sequence[int],
                 stats: Sequence[str] = ()) -> list[bytes]:
    """Each group of ``table``'s rows (groups start at ``starts``, ascending, the first at
    0, none empty) as the bytes of one Parquet file, with statistics (min, max, null count)
    of the ``stats`` columns only. ``table``'s schema must be :func:`encodable`."""
    refusal = _refusal(table.schema)
    if refusal is not None:
        raise LakeError(refusal)
    ends = [*starts[1:], table.num_rows]
    if not starts or starts[0] != 0 or any(e <= s for s, e in zip(starts, ends, strict=True)):
        raise LakeError(f"file groups starting at {list(starts)[:8]} do not split "
                        f"{table.num_rows} rows into non-empty files")
    layout = _layout(table.schema, frozenset(stats))
    table = table.combine_chunks()
    row_starts = np.asarray(starts, dtype=np.int64)
    leaves: list[cols.Leaf] = []
    bounds: list[cols.Bounds | None] = []
    for f, column in zip(table.schema, table.columns, strict=True):
        arr = column.chunk(0) if column.num_chunks else pa.array([], f.type)
        at = len(leaves)
        if pa.types.is_list(f.type):
            widths = [lf.width for lf in layout.leaves[at:at + f.type.value_type.num_fields]]
            leaves += cols.list_leaves(arr, widths)
            bounds += [None] * len(widths)
            continue
        if pa.types.is_timestamp(f.type):
            arr = arr.view(pa.int64())
        spec = layout.leaves[at]
        leaves.append(cols.flat_leaf(arr, spec.width))
        bounds.append(cols.bounds(arr, spec.width, row_starts) if spec.stats else None)
    # Most files' levels are all alike in a column: one check per column for every file.
    def_runs = [cols.runs(c.defs, c.level_at, row_starts) for c in leaves]
    rep_runs = [None if c.reps is None else cols.runs(c.reps, c.level_at, row_starts)
                for c in leaves]
    return [_file(layout, leaves, bounds, def_runs, rep_runs, g, start, end)
            for g, (start, end) in enumerate(zip(starts, ends, strict=True))]


# Pre-encoded field headers: (delta, type) as one byte.
_F1_I32, _F1_I64, _F2_I64 = tc.field(1, tc.I32), tc.field(1, tc.I64), tc.field(2, tc.I64)
_DATA_PAGE = tc.field(1, tc.I32) + tc.zigzag(0)  # PageHeader.type
_PAGE_TAIL = b"".join((tc.field(1, tc.I32), tc.zigzag(_PLAIN), tc.field(1, tc.I32),
                       tc.zigzag(_RLE), tc.field(1, tc.I32), tc.zigzag(_RLE), b"\x00\x00"))
_STATS = tc.field(3, tc.STRUCT)
_PAGE_DATA = tc.field(2, tc.STRUCT)  # PageHeader.data_page_header


def _file(layout: _Layout, leaves: Sequence[cols.Leaf], bounds: Sequence[cols.Bounds | None],
          def_runs: Sequence[list[int]], rep_runs: Sequence[list[int] | None], g: int,
          start: int, end: int) -> bytes:
    """File ``g``: rows ``start`` to ``end`` of every leaf."""
    parts = [_MAGIC]
    pos = len(_MAGIC)
    chunks = []
    for spec, leaf, b, defs, reps in zip(layout.leaves, leaves, bounds, def_runs, rep_runs,
                                         strict=True):
        lo, hi = leaf.level_at[start], leaf.level_at[end]
        count = hi - lo
        levels = cols.levels(leaf.defs[lo:hi], spec.bits, defs[g])
        if leaf.reps is not None and reps is not None:
            levels = cols.levels(leaf.reps[lo:hi], 1, reps[g]) + levels
        values = leaf.values[leaf.byte_at[start]:leaf.byte_at[end]].tobytes()
        size = len(levels) + len(values)
        sized = tc.zigzag(size)
        # PageHeader: DATA_PAGE, sizes, then its DataPageHeader.
        page = b"".join((_DATA_PAGE, _F1_I32, sized, _F1_I32, sized, _PAGE_DATA, _F1_I32,
                         tc.zigzag(count), _PAGE_TAIL))
        chunk = len(page) + size
        chunk_size = tc.zigzag(chunk)
        # ColumnMetaData from num_values (5) on: sizes, data_page_offset (9), statistics (12).
        meta = [spec.head, _F1_I64, tc.zigzag(count), _F1_I64, chunk_size, _F1_I64,
                chunk_size, _F2_I64, tc.zigzag(pos)]
        if b is not None:
            meta += [_STATS, _statistics(b, g, spec.width)]
        meta.append(b"\x00\x00")  # ColumnMetaData's end, then ColumnChunk's
        chunks.append(b"".join(meta))
        parts += (page, levels, values)
        pos += chunk
    rows = tc.zigzag(end - start)
    data = tc.zigzag(pos - len(_MAGIC))
    group = tc.Struct().sequence(1, tc.STRUCT, chunks).encoded()
    group += b"".join((_F1_I64, data, _F1_I64, rows, _F2_I64, tc.zigzag(len(_MAGIC)),
                       _F1_I64, data, tc.field(1, tc.I16), tc.zigzag(0), b"\x00"))
    footer = b"".join((layout.footer_head, _F1_I64, rows,
                       tc.Struct(after=3).sequence(4, tc.STRUCT, [group]).encoded(),
                       layout.footer_tail))
    parts += (footer, struct.pack("<I", len(footer)), _MAGIC)
    return b"".join(parts)
