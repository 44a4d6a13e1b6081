"""Delta checkpoints written beside the commits that call for them, in a thread of their own.

A log commit whose version is a multiple of the checkpoint interval writes a checkpoint
(:meth:`~compactor.lake.log_follower.LogFollower.append`, step 6). Writing one opens the table
and rewrites every live file's action, so a micro-batch that commits to many topics' logs
would wait for several of them. A long-running mirror (``compactor run``) hands them to this
module's thread instead (:func:`start`), which writes them while the next micro-batch is read;
delta-rs does that work without Python's lock. A checkpoint is a shortcut for readers, never
data: one not written when the process dies is written at the next multiple. Every other
process (the CLI's one-shot verbs, tests) writes its checkpoints at once, in its commit.

A table's newer checkpoint replaces an older one still queued: only the newest is worth writing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class _Writer:
    """One thread writing the queued checkpoints, oldest request first, one per table."""

    def __init__(self) -> None:
        self._pending: dict[str, Callable[[], None]] = {}  # table uri -> its newest request
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="delta-checkpoints", daemon=True)
        self._thread.start()

    def put(self, uri: str, write: Callable[[], None]) -> bool:
        """Queue ``write`` for ``uri``; False when the writer is closing (write it yourself)."""
        with self._cond:
            if self._closed:
                return False
            self._pending.pop(uri, None)  # re-queued at the end: requests keep their order
            self._pending[uri] = write
            self._cond.notify_all()
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                uri = next(iter(self._pending))
                write = self._pending.pop(uri)
                self._busy = True
            try:
                write()
            except Exception:  # the write logs its own failures; never let the thread die
                log.exception("checkpoint of %s failed", uri)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def close(self, timeout_s: float) -> bool:
        """Write what is queued, then end the thread; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return True


_LOCK = threading.Lock()
_WRITER: _Writer | None = None


def start() -> None:
    """Write this process's checkpoints in a thread of their own from now on."""
    global _WRITER
    with _LOCK:
        if _WRITER is None:
            _WRITER = _Writer()


def stop(timeout_s: float = 60.0) -> None:
    """Write the queued checkpoints (up to ``timeout_s``), then write them at once again."""
    global _WRITER
    with _LOCK:
        writer, _WRITER = _WRITER, None
    if writer is not None and not writer.close(timeout_s):
        log.warning("checkpoints still queued after %.0f s were left for the next ones due",
                    timeout_s)


def write(uri: str, checkpoint: Callable[[], None]) -> None:
    """Write the checkpoint of ``uri`` now, or queue it when :func:`start` was called."""
    with _LOCK:
        writer = _WRITER
    if writer is None or not writer.put(uri, checkpoint):
        checkpoint()
