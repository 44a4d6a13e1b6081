"""The cleaner's offset map: key -> last offset of that key in the dirty range.

As in Kafka's cleaner, a key is stored as a 16-byte digest beside an 8-byte offset: 24 bytes
per key, so the map for ``log.cleaner.dedupe.buffer.size`` bytes holds ``size * load_factor
/ 24`` keys and never more.

The digest of a key of at most 15 bytes is the key itself, ended by a 0x01 byte and padded
with zeros: exact, and computed for a whole batch at once with numpy. A longer key's digest
is its MD5, as in Kafka (two long keys with the same MD5 would be treated as one; Kafka
accepts the same risk). Both are then passed through a two-round Feistel permutation of the
128 bits, which loses nothing (equal outputs mean equal inputs) and spreads every digest
evenly, so that the map can be kept sorted by the first 64-bit word: integer sorts and
searches instead of byte-string ones.

Given the dirty range's first offset, the map also keeps one bit per offset from there,
set when the record at that offset is superseded by a later one of its key (the offset the
map held before, or an earlier record of the same batch). Rewriting the dirty range then
asks the bits instead of digesting each key again and searching the map: the cleaner's
first pass over a log, where all of it is dirty, does half the hashing and searching. The
bits cover at most ``buffer_bytes`` offsets (``buffer_bytes / 8`` bytes, an eighth more than
the map); records past them, and records below the dirty range, are looked up by key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

BYTES_PER_ENTRY = 24
SHORT_KEY_BYTES = 15

Digests = npt.NDArray[np.uint64]  # shape (n, 2): the sort word, then the second word
Offsets = npt.NDArray[np.int64]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finalizer: every input bit moves about half the output bits."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _as_binary(keys: pa.Array | Sequence[bytes | None]) -> pa.Array:
    if not isinstance(keys, pa.Array | pa.ChunkedArray):
        keys = pa.array(keys, pa.binary())
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if keys.type != pa.binary():
        keys = keys.cast(pa.binary())
    return keys


def digests(keys: pa.Array | Sequence[bytes | None]) -> Digests:
    """The map's 16-byte form of each key; a null key digests like the empty key (null keys
    never reach the log)."""
    keys = pc.fill_null(_as_binary(keys), b"")
    n = len(keys)
    if n == 0:
        return np.empty((0, 2), dtype=np.uint64)
    # key + 0x01 + zeros, cut at 16 bytes: every value is then exactly 16 bytes long
    padded = pc.binary_slice(pc.binary_join_element_wise(keys, _ZEROS, b"\x01"), 0, 16)
    _validity, offsets_buf, data_buf = padded.buffers()
    start = int(np.frombuffer(offsets_buf, dtype=np.int32)[padded.offset])
    raw = np.frombuffer(data_buf, dtype=np.uint8)[start:start + 16 * n].reshape(n, 16).copy()
    lengths = pc.binary_length(keys).to_numpy(zero_copy_only=False)
    long = np.flatnonzero(lengths > SHORT_KEY_BYTES)
    if len(long):
        md5 = hashlib.md5
        joined = b"".join(md5(k, usedforsecurity=False).digest()
                          for k in keys.take(pa.array(long)).to_pylist())
        raw[long] = np.frombuffer(joined, dtype=np.uint8).reshape(-1, 16)
    words = raw.view("<u8")
    first, second = words[:, 0], words[:, 1]
    second = second ^ _mix(first)
    first = first ^ _mix(second)
    return np.stack([first, second], axis=1)


_ZEROS = pa.scalar(bytes(SHORT_KEY_BYTES), pa.binary())


class OffsetMap:
    """A bounded map from key digest to the largest offset seen for it."""

    def __init__(self, buffer_bytes: int, load_factor: float = 0.9,
                 first_offset: int | None = None) -> None:
        self.capacity = max(1, int(buffer_bytes // BYTES_PER_ENTRY * load_factor))
        # superseded offsets as bits from first_offset (see the module's docstring)
        self._first_offset = first_offset
        self._base = first_offset if first_offset is not None else 0
        self._tracked = max(0, int(buffer_bytes)) if first_offset is not None else 0
        self._bits: npt.NDArray[np.uint8] = np.zeros(0, dtype=np.uint8)
        # sorted by (first word, second word); kept as two contiguous arrays for searchsorted
        self._first: npt.NDArray[np.uint64] = np.empty(0, dtype=np.uint64)
        self._second: npt.NDArray[np.uint64] = np.empty(0, dtype=np.uint64)
        self._offsets: Offsets = np.empty(0, dtype=np.int64)
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._first)

    @property
    def utilization(self) -> float:
        return len(self) / self.capacity

    def put_batch(self, keys: Digests, offsets: Offsets) -> int:
        """Add records given in increasing offset order; returns how many were taken.

        When the map cannot hold every new key, it takes the longest prefix whose new keys
        fit, so that the map describes exactly the offsets up to ``latest_offset``.
        """
        if len(keys) == 0:
            return 0
        if self._first_offset is not None and offsets[0] < self._first_offset:
            raise ValueError(f"offset {int(offsets[0])} is below the map's first offset "
                             f"{self._first_offset}: the map holds the dirty range, which "
                             "starts there")
        unique, first, last = _distinct(keys)
        pos, found = self._locate(unique)
        new_first = np.sort(first[~found])
        free = self.capacity - len(self)
        taken = len(keys) if len(new_first) <= free else int(new_first[free])
        if taken == 0:
            return 0
        if taken < len(keys):  # only a prefix fits: its own distinct keys and positions
            keys, offsets = keys[:taken], offsets[:taken]
            unique, first, last = _distinct(keys)
            pos, found = self._locate(unique)
        latest = offsets[last]
        if self._tracked:
            earlier = np.ones(len(keys), dtype=bool)
            earlier[last] = False
            self._mark(self._offsets[pos[found]])
            self._mark(offsets[earlier])
        self._offsets[pos[found]] = latest[found]
        fresh = ~found
        self._first = np.insert(self._first, pos[fresh], unique[fresh, 0])
        self._second = np.insert(self._second, pos[fresh], unique[fresh, 1])
        self._offsets = np.insert(self._offsets, pos[fresh], latest[fresh])
        self.latest_offset = int(offsets[-1])
        return taken

    def _mark(self, superseded: Offsets) -> None:
        index = superseded - self._base
        index = index[index < self._tracked]
        if len(index) == 0:
            return
        need = int(index.max()) // 8 + 1
        if need > len(self._bits):
            grown = np.zeros(min(max(need, 2 * len(self._bits)), (self._tracked + 7) // 8),
                             dtype=np.uint8)
            grown[:len(self._bits)] = self._bits
            self._bits = grown
        np.bitwise_or.at(self._bits, index >> 3,
                         np.left_shift(1, index & 7).astype(np.uint8))

    def superseded(self, offsets: Offsets, keys: pa.Array | pa.ChunkedArray) -> npt.NDArray[
            np.bool_]:
        """Whether the map holds a later offset for each record's key (the cleaner drops
        those). Bits answer for the dirty range they cover; other records are looked up."""
        out = np.zeros(len(offsets), dtype=bool)
        if len(self) == 0 or len(offsets) == 0:
            return out
        if self._tracked:
            index = offsets - self._base
            bitwise = (index >= 0) & (index < len(self._bits) * 8)
            at = index[bitwise]
            out[bitwise] = (self._bits[at >> 3] >> (at & 7)) & 1 == 1
            # offsets past the bits set so far (and within those tracked) were never superseded
            rest = np.flatnonzero((index < 0) | (index >= self._tracked))
        else:
            rest = np.arange(len(offsets))
        if len(rest) == len(offsets):
            mapped = self.lookup(digests(keys))
            return mapped > offsets
        if len(rest):
            mapped = self.lookup(digests(_as_binary(keys).take(pa.array(rest))))
            out[rest] = mapped > offsets[rest]
        return out

    def _locate(self, keys: Digests) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
        """(insertion position, present) of each key in the sorted map."""
        first, second = self._first, self._second
        wanted_first = np.ascontiguousarray(keys[:, 0])
        wanted_second = keys[:, 1]
        pos = np.searchsorted(first, wanted_first)
        found = np.zeros(len(keys), dtype=bool)
        size = len(first)
        hit = np.flatnonzero(pos < size)
        hit = hit[first[pos[hit]] == wanted_first[hit]]
        if len(hit):
            left = pos[hit]
            there = second[left]
            found[hit] = there == wanted_second[hit]
            pos[hit] = left + (wanted_second[hit] > there)
            # A first word shared by two stored keys (about 2**-64 a pair): search the run.
            shared = hit[(left + 1 < size) & (first[np.minimum(left + 1, size - 1)]
                                               == wanted_first[hit])]
            for i in shared:
                lo = int(np.searchsorted(first, wanted_first[i], side="left"))
                hi = int(np.searchsorted(first, wanted_first[i], side="right"))
                j = int(np.searchsorted(second[lo:hi], wanted_second[i]))
                pos[i] = lo + j
                found[i] = j < hi - lo and second[lo + j] == wanted_second[i]
        return pos, found

    def lookup(self, keys: Digests) -> Offsets:
        """The map's offset for each key, or -1 where the key is not in the map.

        The keys are searched in map order: binary searches of sorted needles walk the map
        nearly in order, far faster than in record order, sort included.
        """
        out = np.full(len(keys), -1, dtype=np.int64)
        if len(self) == 0 or len(keys) == 0:
            return out
        order = np.argsort(keys[:, 0])
        pos, found = self._locate(keys[order])
        out[order[found]] = self._offsets[pos[found]]
        return out


def _distinct(keys: Digests) -> tuple[Digests, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The distinct keys in map order, with the index of each one's first and last record."""
    # One 64-bit sort word is enough unless two different keys share it (about 2**-64 a
    # pair): then both words are sorted on. The sort need not be stable (a stable one is
    # slower): each key's first and last record are the least and greatest
    # index in its run.
    order = np.argsort(keys[:, 0])
    ordered = keys[order]
    same_first = ordered[1:, 0] == ordered[:-1, 0]
    if (same_first & (ordered[1:, 1] != ordered[:-1, 1])).any():
        order = np.lexsort((keys[:, 1], keys[:, 0]))
        ordered = keys[order]
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    runs = np.flatnonzero(starts)
    return (ordered[runs], np.minimum.reduceat(order, runs),
            np.maximum.reduceat(order, runs))
