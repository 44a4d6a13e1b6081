"""The driver gives the native memory it frees back to the system (glibc keeps it otherwise)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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


# Run in a process of its own: glibc's thresholds are process-wide and move with what the
# process freed before. Prints the MB that freeing 64 one-MiB blocks gave back on its own.
_FREED_BLOCKS = textwrap.dedent("""
    import os, sys
    from compactor.ops.native_heap import NativeHeapTrimmer, resident_bytes
    big = bytearray(8 << 20)
    big[:] = b"x" * len(big)
    del big  # served by mmap and freed: glibc raises its thresholds to 8 MiB
    if sys.argv[1] == "start":
        assert NativeHeapTrimmer().start(os.environ) == ["mmap_threshold", "trim_threshold"]
    pin = 64 * 1024
    blocks, pins = [], []
    for _ in range(64):
        blocks.append(b"x" * (1 << 20))
        pins.append(b"p" * pin)  # keeps each freed block from joining the heap's top
    before = resident_bytes()
    del blocks
    print((before - resident_bytes()) >> 20)
""")


def _freed_mb(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _FREED_BLOCKS, mode], capture_output=True,
                          text=True, check=True, timeout=60)
    return int(done.stdout)


@glibc_only
def test_large_blocks_go_back_when_freed_once_the_thresholds_are_fixed() -> None:
    """glibc raises its mmap and trim thresholds after a large free, then serves large blocks
    from heaps that keep them. The service fixes both at glibc's defaults before it starts."""
    assert _freed_mb("glibc-default") < 16  # the blocks stay resident after free
    assert _freed_mb("start") >= 48  # each went back to the system as it was freed


@glibc_only
def test_a_threshold_the_user_set_for_the_process_stays_theirs() -> None:
    trimmer = NativeHeapTrimmer()
    both = {"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "65536"}
    assert trimmer.start(both) == []
    assert trimmer.start({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=65536"}) == [
        "mmap_threshold"]
