"""Ctrl-C and SIGTERM that arrive while the command is still starting.

Loading the verbs' modules, the configuration and the engine takes seconds before
``compactor run`` installs its service's handlers, and Python's defaults would end a run
stopped then with a traceback or by the signal (exit -15), where a stopped run exits 0.
Nothing is written to the lake before those handlers are in place, so stopping is safe.

1. :func:`hold`, first thing in the console script: the first signal is only recorded; a
   second stops at once with exit 130, as it does once the service runs.
2. Once the verb is known, :func:`for_verb`. A verb that stops gracefully (``run``) raises
   :class:`StopRequested` for a recorded signal and from then on for any signal, until the
   service's own handlers replace these. Any other verb gets Python's defaults back, and a
   recorded signal is raised again under them.
3. :func:`compactor.cli.main.main` turns :class:`StopRequested` into exit 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from compactor.exceptions import INTERRUPTED_EXIT

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(BaseException):
    """A stop signal came before the verb's own handlers: leave with nothing done."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class _Hold:
    def __init__(self) -> None:
        self.held = False
        self.pending: int | None = None
        self.raising = False

    def record(self, signum: int, _frame: FrameType | None) -> None:
        if self.pending is not None:
            print(f"compactor: second {signal.Signals(signum).name}: stopping now",
                  file=sys.stderr, flush=True)
            os._exit(INTERRUPTED_EXIT)
        self.pending = signum
        if self.raising:
            raise StopRequested(signum)


_HOLD = _Hold()


def hold() -> None:
    """Record SIGINT and SIGTERM instead of dying of them (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _HOLD.record)
    _HOLD.held = True


def for_verb(graceful: bool) -> None:
    """Hand the signals over once the verb is known (a no-op unless :func:`hold` ran)."""
    if not _HOLD.held:
        return
    _HOLD.held = False
    if graceful:
        _HOLD.raising = True
        if _HOLD.pending is not None:
            raise StopRequested(_HOLD.pending)
        return
    defaults: dict[int, Any] = {signal.SIGINT: signal.default_int_handler,
                                signal.SIGTERM: signal.SIG_DFL}
    for signum, handler in defaults.items():
        signal.signal(signum, handler)
    if _HOLD.pending is not None:
        signal.raise_signal(_HOLD.pending)
