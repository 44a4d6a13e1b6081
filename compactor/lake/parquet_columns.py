"""A table's columns as Parquet leaves, for every row at once: definition and repetition
levels and PLAIN values, with where each row's levels and bytes start, so that one file's
part of a leaf is a slice (:mod:`compactor.lake.parquet_encoder`).

Every column is optional (nullable). A flat column has definition level 1 for a value and 0
for a null. A list of structs (Kafka's headers) has three levels above its fields: 0 a null
list, 1 an empty one, 2 a null element, 3 a null field, 4 a value; each element after a
row's first repeats at level 1.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from compactor.lake.thrift_compact import uvar

U8 = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass
class Leaf:
    """A leaf's levels and values for all rows; ``level_at`` and ``byte_at`` (one more than
    the rows) are where each row's levels and value bytes start, as Python lists."""

    defs: U8
    reps: U8 | None
    values: U8
    level_at: list[int]
    byte_at: list[int]


@dataclass(frozen=True)
class Bounds:
    """Per file, a fixed-width column's least and greatest value and nulls (least > greatest
    when every value is null)."""

    lo: list[int]
    hi: list[int]
    nulls: list[int]


def valid(arr: pa.Array) -> Mask:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid())


def numbers(arr: pa.Array, width: int) -> npt.NDArray[np.int64] | npt.NDArray[np.int32]:
    """A fixed-width column's values, a null as whatever its slot holds."""
    dtype = np.dtype("<i8" if width == 8 else "<i4")
    data = arr.buffers()[1]
    if data is None:  # all null
        return np.zeros(len(arr), dtype)
    return np.frombuffer(data, dtype=dtype)[arr.offset:arr.offset + len(arr)]


def _offsets(arr: pa.Array) -> Ints:
    """A binary or list array's offsets, from its own first slot."""
    return np.frombuffer(arr.buffers()[1], dtype=np.int32)[
        arr.offset:arr.offset + len(arr) + 1].astype(np.int64)


def _exclusive(counts: Ints) -> Ints:
    """Where each count's run starts, and the total last."""
    return np.concatenate((np.zeros(1, np.int64), np.cumsum(counts)))


def _byte_arrays(arr: pa.Array, present: Mask) -> tuple[U8, Ints]:
    """Byte arrays PLAIN (a 4-byte little-endian length before each value) and where each
    slot's bytes start."""
    offsets = _offsets(arr)
    spans = np.diff(offsets)
    lengths = spans * present
    byte_at = _exclusive((lengths + 4) * present)
    out = np.empty(int(byte_at[-1]), dtype=np.uint8)
    is_length = np.zeros(len(out), dtype=bool)
    length_pos = (byte_at[:-1][present][:, None] + np.arange(4)).ravel()
    is_length[length_pos] = True
    out[length_pos] = lengths[present].astype("<i4").view(np.uint8)
    data = arr.buffers()[2]
    body = np.frombuffer(data, dtype=np.uint8)[offsets[0]:offsets[-1]] if data is not None \
        else np.empty(0, np.uint8)
    if not present.all():  # a null slot may still span bytes
        body = body[np.repeat(present, spans)]
    out[~is_length] = body
    return out, byte_at


def _fixed(arr: pa.Array, present: Mask, width: int) -> tuple[U8, Ints]:
    """Fixed-width values PLAIN, nulls left out, and where each slot's bytes start."""
    values = numbers(arr, width)
    kept = values if present.all() else values[present]
    return np.ascontiguousarray(kept).view(np.uint8), _exclusive(present * width)


def plain(arr: pa.Array, present: Mask, width: int) -> tuple[U8, Ints]:
    """``arr``'s ``present`` values PLAIN (``width`` bytes each; 0: byte arrays) and where
    each slot's bytes start."""
    return _fixed(arr, present, width) if width else _byte_arrays(arr, present)


def flat_leaf(arr: pa.Array, width: int) -> Leaf:
    """A flat column (a timestamp viewed as int64) as a leaf."""
    present = valid(arr)
    values, byte_at = plain(arr, present, width)
    return Leaf(present.astype(np.uint8), None, values, list(range(len(arr) + 1)),
                byte_at.tolist())


def bounds(arr: pa.Array, width: int, starts: Ints) -> Bounds:
    """Each file's bounds of a fixed-width column, files starting at rows ``starts``."""
    values = numbers(arr, width)
    present = valid(arr)
    big = np.iinfo(values.dtype)
    return Bounds(np.minimum.reduceat(np.where(present, values, big.max), starts).tolist(),
                  np.maximum.reduceat(np.where(present, values, big.min), starts).tolist(),
                  np.add.reduceat((~present).astype(np.int64), starts).tolist())


def list_leaves(arr: pa.Array, widths: list[int]) -> list[Leaf]:
    """A list of structs' fields (``widths`` of each, 0 for byte arrays) as leaves."""
    present = valid(arr)
    offsets = _offsets(arr)
    lengths = np.diff(offsets) * present
    starts = _exclusive(lengths)
    total = int(starts[-1])
    first = np.repeat(offsets[:-1] - starts[:-1], lengths)
    elements = arr.values.take(pa.array(first + np.arange(total), pa.int64()))
    element_ok = valid(elements)
    entries = np.maximum(lengths, 1)  # a null or empty list still has one level
    level_at = _exclusive(entries)
    has = lengths > 0
    element_pos = np.repeat(level_at[:-1][has] - starts[:-1][has], lengths[has]) + \
        np.arange(total)
    reps = np.ones(int(level_at[-1]), dtype=np.uint8)
    reps[level_at[:-1]] = 0
    row_defs = present.astype(np.uint8).repeat(entries)
    out = []
    for i, width in enumerate(widths):
        child = elements.field(i)
        child_ok = valid(child) & element_ok
        defs = row_defs.copy()
        defs[element_pos] = np.where(element_ok, np.where(child_ok, 4, 3), 2)
        values, element_bytes = plain(child, child_ok, width)
        out.append(Leaf(defs, reps, values, level_at.tolist(),
                        element_bytes[starts].tolist()))
    return out


def runs(values: U8, level_at: list[int], starts: Ints) -> list[int]:
    """Per file (files starting at rows ``starts``), the level all of its ``values`` have,
    or -1 when they differ."""
    edges = np.asarray(level_at)[starts]
    lo, hi = np.minimum.reduceat(values, edges), np.maximum.reduceat(values, edges)
    same: list[int] = np.where(lo == hi, lo.astype(np.int64), -1).tolist()
    return same


def levels(values: U8, bits: int, level: int) -> bytes:
    """Levels in the RLE / bit-packed hybrid, behind their 4-byte length (format 1 pages):
    one run when they are all ``level`` (not -1), else one bit-packed run."""
    if level >= 0:
        return run(len(values), level)
    groups = -(-len(values) // 8)
    padded = np.zeros(groups * 8, dtype=np.uint8)
    padded[:len(values)] = values
    planes = (padded[:, None] >> np.arange(bits, dtype=np.uint8)) & 1
    body = uvar((groups << 1) | 1) + np.packbits(planes.ravel(), bitorder="little").tobytes()
    return struct.pack("<I", len(body)) + body


@functools.lru_cache(maxsize=4096)
def run(count: int, level: int) -> bytes:
    """``count`` equal levels as one RLE run, behind its 4-byte length."""
    body = uvar(count << 1) + bytes((level,))
    return struct.pack("<I", len(body)) + body
