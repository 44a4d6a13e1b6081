"""The cleaner's offset map: key -> last offset of that key in the dirty range.

As in Kafka's cleaner, a key is stored as its 16-byte MD5 digest beside an 8-byte offset:
24 bytes per key, in two sorted numpy arrays, so the map for ``log.cleaner.dedupe.buffer.size``
bytes holds ``size * load_factor / 24`` keys and never more. Two keys with the same digest
would be treated as one (Kafka accepts the same risk).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

BYTES_PER_ENTRY = 24
DIGEST = np.dtype("S16")

Digests = npt.NDArray[np.bytes_]
Offsets = npt.NDArray[np.int64]


def digests(keys: Sequence[bytes | None]) -> Digests:
    """MD5 of each key; a null key hashes like the empty key (null keys never reach the log)."""
    md5 = hashlib.md5
    return np.array([md5(k or b"", usedforsecurity=False).digest() for k in keys], dtype=DIGEST)


class OffsetMap:
    """A bounded map from key digest to the largest offset seen for it."""

    def __init__(self, buffer_bytes: int, load_factor: float = 0.9) -> None:
        self.capacity = max(1, int(buffer_bytes // BYTES_PER_ENTRY * load_factor))
        self._keys: Digests = np.empty(0, dtype=DIGEST)
        self._offsets: Offsets = np.empty(0, dtype=np.int64)
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._keys)

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
        unique, first = np.unique(keys, return_index=True)
        new_first = np.sort(first[~self._contains(unique)])
        free = self.capacity - len(self)
        taken = len(keys) if len(new_first) <= free else int(new_first[free])
        if taken == 0:
            return 0
        keys, offsets = keys[:taken], offsets[:taken]
        merged_keys = np.concatenate([self._keys, keys])
        merged_offsets = np.concatenate([self._offsets, offsets])
        order = np.argsort(merged_keys, kind="stable")  # later entries win: they come last
        merged_keys, merged_offsets = merged_keys[order], merged_offsets[order]
        last = np.ones(len(merged_keys), dtype=bool)
        last[:-1] = merged_keys[1:] != merged_keys[:-1]
        self._keys, self._offsets = merged_keys[last], merged_offsets[last]
        self.latest_offset = int(offsets[-1])
        return taken

    def _contains(self, keys: Digests) -> npt.NDArray[np.bool_]:
        if len(self._keys) == 0:
            return np.zeros(len(keys), dtype=bool)
        pos = np.searchsorted(self._keys, keys)
        pos[pos == len(self._keys)] = 0
        return np.asarray(self._keys[pos] == keys)

    def lookup(self, keys: Digests) -> Offsets:
        """The map's offset for each key, or -1 where the key is not in the map."""
        out = np.full(len(keys), -1, dtype=np.int64)
        if len(self._keys) == 0 or len(keys) == 0:
            return out
        pos = np.searchsorted(self._keys, keys)
        pos[pos == len(self._keys)] = 0
        found = self._keys[pos] == keys
        out[found] = self._offsets[pos[found]]
        return out
