"""The driver gives the native memory it frees back to the system (glibc keeps it otherwise)."""

from __future__ import annotations

import pytest

from compactor.ops.native_heap import NativeHeapTrimmer, resident_bytes

glibc_only = pytest.mark.skipif(not NativeHeapTrimmer().available or resident_bytes() is None,
                                reason="needs glibc's malloc_trim and /proc (Linux)")


@glibc_only
def test_freed_memory_inside_the_heap_goes_back_to_the_system() -> None:
    """What a long-running driver leaves behind: memory freed below memory still in use, which
    glibc keeps resident (only the heap's top is returned on its own). A trim returns it."""
    trimmer = NativeHeapTrimmer()
    chunk = 16 * 1024  # malloc's heap, not pymalloc's arenas and not its own mmap
    chunks = [b"x" * chunk for _ in range(4096)]  # 64 MB, every page written
    pins = chunks[::64]  # one in 64 kept: the freed 63 between each pair cannot shrink the top
    before = resident_bytes()
    del chunks
    kept = resident_bytes()
    assert before is not None and kept is not None
    assert before - kept < 16 * 2**20, "glibc returned the holes by itself: nothing to test"
    released = trimmer.trim()
    assert released is not None and released >= 48 * 2**20, released
    assert trimmer.released_bytes == released and trimmer.trims == 1
    assert len(pins) == 64


def test_trims_at_most_once_an_interval() -> None:
    now = [100.0]
    trimmer = NativeHeapTrimmer(interval_s=10.0, clock=lambda: now[0])
    assert trimmer.maybe_trim() is None  # not before the first interval has passed
    now[0] = 109.9
    assert trimmer.maybe_trim() is None
    now[0] = 110.0
    ran = trimmer.maybe_trim()
    assert trimmer.trims == (1 if trimmer.available else 0)
    assert (ran is not None) == trimmer.available
    now[0] = 115.0
    assert trimmer.maybe_trim() is None
    now[0] = 120.0
    trimmer.maybe_trim()
    assert trimmer.trims == (2 if trimmer.available else 0)
