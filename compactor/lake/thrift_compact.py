"""Thrift's compact protocol, the encoding of Parquet's page headers and footers: the writing
half, for the structs :mod:`compactor.lake.parquet_encoder` builds."""

from __future__ import annotations

from collections.abc import Sequence

# The compact protocol's field types.
BOOL_TRUE, BOOL_FALSE, I16, I32, I64, BINARY, LIST, STRUCT = 1, 2, 4, 5, 6, 8, 9, 12


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint(n) for n in range(1 << 14)]
_HALF = len(_SMALL) // 2


def uvar(n: int) -> bytes:
    """An unsigned varint (a length or a list's size)."""
    return _SMALL[n] if n < 16384 else _varint(n)


def zigzag(n: int) -> bytes:
    """A signed integer as the compact protocol's zigzag varint (its i16, i32 and i64)."""
    if 0 <= n < _HALF:
        return _SMALL[n << 1]
    return _varint(n << 1 if n >= 0 else (-n << 1) - 1)


def binary(value: bytes) -> bytes:
    """A binary or string value: its length, then its bytes."""
    return uvar(len(value)) + value


def field(delta: int, kind: int) -> bytes:
    """A field's header ``delta`` ids after the previous field of its struct (1 to 15)."""
    return bytes(((delta << 4) | kind,))


class Struct:
    """A struct being written, its fields in ascending ids."""

    def __init__(self, after: int = 0) -> None:
        """``after``: the id of the field before the first written here (a struct whose
        first fields are encoded elsewhere)."""
        self.out = bytearray()
        self._last = [after]

    def _field(self, fid: int, kind: int) -> None:
        delta = fid - self._last[-1]
        if 0 < delta <= 15:
            self.out.append((delta << 4) | kind)
        else:
            self.out.append(kind)
            self.out += zigzag(fid)
        self._last[-1] = fid

    def number(self, fid: int, value: int, kind: int = I32) -> Struct:
        self._field(fid, kind)
        self.out += zigzag(value)
        return self

    def flag(self, fid: int, value: bool) -> Struct:
        self._field(fid, BOOL_TRUE if value else BOOL_FALSE)  # the value is the type
        return self

    def binary(self, fid: int, value: bytes) -> Struct:
        self._field(fid, BINARY)
        self.out += binary(value)
        return self

    def begin(self, fid: int) -> Struct:
        """Open a struct-valued field; :meth:`end` closes it."""
        self._field(fid, STRUCT)
        self._last.append(0)
        return self

    def end(self) -> Struct:
        self.out.append(0)
        self._last.pop()
        return self

    def sequence(self, fid: int, kind: int, items: Sequence[bytes]) -> Struct:
        """A list of ``items``, each already encoded as ``kind``."""
        self._field(fid, LIST)
        n = len(items)
        self.out += bytes(((n << 4) | kind,)) if n < 15 else bytes((0xF0 | kind,)) + uvar(n)
        for item in items:
            self.out += item
        return self

    def encoded(self) -> bytes:
        return bytes(self.out)
