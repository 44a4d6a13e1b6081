"""PySpark's worker daemon, with no TCP delay between the JVM and a task's worker.

The session names this module in ``spark.python.daemon.module``; Spark starts it with
``python -m`` and it runs PySpark's own daemon, which forks a worker per connection and calls
the worker once per task. Over loopback TCP, Nagle's algorithm holds a small write back until
the other side acknowledges the one before, and Linux delays that acknowledgement: the JVM
sends a task in several small writes, and a worker returns a large result in more than one,
so a short task waited out the delay (bench/README.md, "Python workers without TCP
delays"). Before each task the daemon puts the worker's socket in quick-ack mode (Linux
leaves it again on its own, so it is set every time) and turns Nagle's algorithm off for the
worker's writes.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections.abc import Callable
from typing import Any

from pyspark import daemon

# Linux only; elsewhere (and over Spark's Unix sockets) the daemon runs as PySpark's.
QUICKACK = getattr(socket, "TCP_QUICKACK", None)
_TCP = (socket.AF_INET, socket.AF_INET6)


def without_tcp_delays(worker: Callable[..., int]) -> Callable[..., int]:
    """``worker`` (PySpark's ``daemon.worker(sock, ...)``), with ``sock`` acknowledging at
    once and sending without Nagle's algorithm when it runs a task."""

    @functools.wraps(worker)
    def run(sock: socket.socket, *args: Any, **kwargs: Any) -> int:
        if QUICKACK is not None and sock.family in _TCP:
            # A socket that refuses only loses the faster round trip; the task still runs.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return worker(sock, *args, **kwargs)

    return run


if __name__ == "__main__":
    daemon.worker = without_tcp_delays(daemon.worker)
    daemon.manager()
