"""How a run is asked to stop: the first SIGINT or SIGTERM after the current commit, the
second at once (exit 130).

Python runs a signal's handler between two bytecodes of whatever the main thread runs, another
handler included: two signals that arrive together (a terminal's Ctrl-C and a supervisor's
SIGTERM, or both held while the process was stopped) can run one handler inside the other. So
which signal is the first is taken in one call into C (a counter's ``next``), before anything
that can be interrupted; a flag tested and then set could be read by both as unset.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
import threading
from types import FrameType

from compactor.exceptions import INTERRUPTED_EXIT

log = logging.getLogger(__name__)


class StopSignals:
    """The run's stop request, set by :meth:`request` (a signal handler) or by code."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._signals = itertools.count()

    def request(self, signum: int | None = None, _frame: FrameType | None = None) -> None:
        """Stop after the current commit; a second signal (or a signal after a stop asked by
        code) stops at once."""
        if signum is None:
            self.requested.set()
            return
        first = next(self._signals) == 0 and not self.requested.is_set()
        name = signal.Signals(signum).name
        if not first:
            # What a kill -9 leaves is safe (nothing half-committed); the user asked twice.
            print(f"compactor: second {name}: stopping now, without waiting for the current "
                  "commit", file=sys.stderr, flush=True)
            os._exit(INTERRUPTED_EXIT)
        self.requested.set()
        log.warning("received %s: stopping after the current commit (send it again to stop "
                    "at once)", name)
