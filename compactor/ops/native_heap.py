"""Give the driver's freed native memory back to the system, as the driver JVM already does.

glibc's malloc keeps what a process frees: it returns only the top of the main heap, and only
past ``M_TRIM_THRESHOLD``; pages freed inside the main heap or inside the per-thread arenas stay
resident. The driver allocates from many threads (Py4J's callback threads running each
micro-batch, delta-rs's tokio pool, Arrow's readers), so its freed memory scatters across arenas.
In a two-hour soak the memory glibc had handed out stayed at 34 MB (``malloc_stats`` at minutes
81-112) while its heaps' resident pages grew 13 MB in the second hour; one ``malloc_trim(0)``
gave 9.5 MB back. The driver JVM trims its own every 10 s (``-XX:TrimNativeHeapInterval``, see
:mod:`streaming.session`); the Python side of the driver had no one to do it.

``malloc_trim(0)`` hands every free whole page of every arena back (``madvise``); it holds each
arena's lock while it walks it, about 0.4 ms for the driver's heaps. On a C library without it
(musl, macOS, Windows) there is nothing of this kind to give back and :class:`NativeHeapTrimmer`
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# The driver JVM's interval (streaming.session.NATIVE_TRIM), for the same reason.
TRIM_INTERVAL_S = 10.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        libc: Any = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    result: Callable[[int], int] = trim
    return result


def resident_bytes() -> int | None:
    """This process's resident memory, from ``/proc/self/statm`` (None off Linux)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


class NativeHeapTrimmer:
    """Trims the C heap at most every ``interval_s``; called from the service's main loop."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._trim = _malloc_trim()
        self._next = clock() + interval_s
        self.trims = 0
        self.released_bytes = 0  # resident memory given back, summed over trims

    @property
    def available(self) -> bool:
        return self._trim is not None

    def maybe_trim(self) -> int | None:
        """Trim if the interval has passed; returns the resident bytes it gave back, if it ran."""
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + self.interval_s
        return self.trim()

    def trim(self) -> int | None:
        """Trim now (None where the C library cannot): the fall in resident memory, if any."""
        if self._trim is None:
            return None
        before = resident_bytes()
        self._trim(0)
        after = resident_bytes()
        released = max(0, before - after) if before is not None and after is not None else 0
        self.trims += 1
        self.released_bytes += released
        if released:
            log.debug("malloc_trim gave back %.1f MB (%.1f MB over %d trims)",
                      released / 2**20, self.released_bytes / 2**20, self.trims)
        return released
