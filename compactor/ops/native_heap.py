"""Give the driver's freed native memory back to the system, as the driver JVM already does.

glibc's malloc keeps what a process frees in two ways, and a driver that runs for months
meets both:

1. **Freed pages stay resident.** glibc returns only the top of the main heap on its own;
   pages freed below memory still in use stay. :meth:`NativeHeapTrimmer.maybe_trim` calls
   ``malloc_trim(0)`` every 10 s, which hands every free whole page of every arena back
   (``madvise``) and shrinks the main heap's top; it holds each arena's lock while it walks
   it. Without it the main heap's resident pages grew while its memory in use stayed level
   (bench/README.md, "Why the code's settings").
2. **Thread heaps keep their tops.** ``malloc_trim`` does not shrink the top of a thread's
   heap; ``free`` does, but only past ``M_TRIM_THRESHOLD``, which glibc raises on its own (to
   twice the largest mmap-served block freed so far, up to 64 MiB), and glibc then serves
   blocks up to that size from the heaps instead of ``mmap``, so a thread heap's top grew
   with little in use (bench/README.md). :meth:`NativeHeapTrimmer.start` sets both thresholds back
   to glibc's defaults (128 KiB), which also stops glibc from moving them: large blocks come
   from ``mmap`` and go back on ``free``, and a heap's top is given back past 128 KiB.
   Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` for its workers for the same reason.

The driver JVM trims its own every 10 s (``-XX:TrimNativeHeapInterval``, see
:mod:`streaming.session`). On a C library without these calls (musl, macOS, Windows) there is
nothing of this kind to give back and the trimmer does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

# The driver JVM's interval (streaming.session.NATIVE_TRIM), for the same reason.
TRIM_INTERVAL_S = 10.0
# mallopt's parameters (malloc.h) and glibc's defaults for them.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
DEFAULT_THRESHOLD = 128 * 1024


@functools.cache
def _glibc() -> tuple[Callable[[int], int], Callable[[int, int], int]] | None:
    """glibc's ``malloc_trim`` and ``mallopt``, or None where the C library lacks them.

    Looked up among the symbols the interpreter already has loaded (its C library), not with
    ``ctypes.util.find_library``, which runs ``ldconfig -p`` in a subprocess each time."""
    try:
        libc: Any = ctypes.CDLL(None)
        trim, mallopt = libc.malloc_trim, libc.mallopt
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no CDLL(None)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return trim, mallopt


def resident_bytes() -> int | None:
    """This process's resident memory, from ``/proc/self/statm`` (None off Linux)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


class NativeHeapTrimmer:
    """Keeps glibc's thresholds fixed and trims its heaps at most every ``interval_s``: set up
    when the service starts, called from its main loop."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._glibc = _glibc()
        self._next = clock() + interval_s
        self.trims = 0
        self.released_bytes = 0  # resident memory given back, summed over trims

    @property
    def available(self) -> bool:
        return self._glibc is not None

    def start(self, environ: Mapping[str, str]) -> list[str]:
        """Fix glibc's mmap and trim thresholds at its defaults (see 2. above), once, before
        the driver's threads do their work; process-wide. A threshold the user set for the
        process (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES``)
        stays theirs. Returns the parameters it set (none where there is no glibc)."""
        if self._glibc is None:
            return []
        _trim, mallopt = self._glibc
        tunables = environ.get("GLIBC_TUNABLES", "")
        fixed = []
        for name, param in (("mmap_threshold", M_MMAP_THRESHOLD),
                            ("trim_threshold", M_TRIM_THRESHOLD)):
            if f"MALLOC_{name.upper()}_" in environ or f"glibc.malloc.{name}=" in tunables:
                log.info("glibc's %s is the one set for this process, not %d", name,
                         DEFAULT_THRESHOLD)
                continue
            if mallopt(param, DEFAULT_THRESHOLD) == 1:  # which also stops glibc moving both
                fixed.append(name)
        return fixed

    def maybe_trim(self) -> int | None:
        """Trim if the interval has passed; returns the resident bytes it gave back, if it ran."""
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        return self.trim()

    def trim(self) -> int | None:
        """Trim now (None where the C library cannot): the fall in resident memory, if any."""
        if self._glibc is None:
            return None
        before = resident_bytes()
        self._glibc[0](0)
        after = resident_bytes()
        released = max(0, before - after) if before is not None and after is not None else 0
        self.trims += 1
        self.released_bytes += released
        if released:
            log.debug("malloc_trim gave back %.1f MB (%.1f MB over %d trims)",
                      released / 2**20, self.released_bytes / 2**20, self.trims)
        return released
