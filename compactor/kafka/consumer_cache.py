"""One assigned consumer kept per process from one read to the next.

Spark keeps its Python workers between tasks, and every micro-batch's write tasks read from
the same cluster: a consumer made per task costs a connection, a metadata request and full
fetch sessions on the broker every batch, which at many partitions weighs on the broker more
than the records do. As Spark's Kafka source pools its consumers per executor, a read here
borrows the process's kept consumer (made on first use, or again when the client
configuration differs), and gives it back with nothing assigned once the read succeeded; a
read that fails closes it, so a broken connection or a half-read fetch never carries over.
A consumer left unused for :data:`IDLE_S` is closed, before the broker drops its idle
connection.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from compactor.kafka.clients import assigned_consumer

# Below the broker's connections.max.idle.ms default (10 minutes), as Spark's
# spark.kafka.consumer.cache.timeout (5 minutes).
IDLE_S = 300.0

_lock = threading.Lock()
_kept: tuple[tuple[tuple[str, str], ...], Any] | None = None
_evictor: threading.Timer | None = None


def _key(client_config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in client_config.items()))


@contextmanager
def borrowed_consumer(client_config: Mapping[str, Any]) -> Iterator[Any]:
    """An assigned consumer (:func:`compactor.kafka.clients.assigned_consumer`) of
    ``client_config`` with nothing assigned, kept for the next read when this one succeeds."""
    global _kept, _evictor
    key = _key(client_config)
    stale = None
    with _lock:
        kept, _kept = _kept, None
        if _evictor is not None:
            _evictor.cancel()
            _evictor = None
    if kept is not None and kept[0] != key:
        stale, kept = kept[1], None
    if stale is not None:
        stale.close()
    consumer = kept[1] if kept is not None else assigned_consumer(client_config)
    try:
        yield consumer
        consumer.unassign()  # drops what was fetched for the read's partitions
    except BaseException:
        consumer.close()
        raise
    with _lock:
        if _kept is None:
            _kept = (key, consumer)
            _evictor = threading.Timer(IDLE_S, _evict, args=(consumer,))
            _evictor.daemon = True
            _evictor.start()
            consumer = None
    if consumer is not None:  # another thread's read gave one back first
        consumer.close()


def _evict(consumer: Any) -> None:
    """Close ``consumer`` if it is still the kept one (nobody borrowed it since)."""
    global _kept
    with _lock:
        if _kept is None or _kept[1] is not consumer:
            return
        _kept = None
    consumer.close()


def close_kept() -> None:
    """Close the kept consumer, if any (a process about to end, or a test)."""
    global _kept, _evictor
    with _lock:
        kept, _kept = _kept, None
        if _evictor is not None:
            _evictor.cancel()
            _evictor = None
    if kept is not None:
        kept[1].close()


atexit.register(close_kept)
