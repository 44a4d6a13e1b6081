"""Every librdkafka client of the product logs through Python logging, never to the terminal.

librdkafka prints its own lines (``%4|1700000000.123|CONFWARN|...``) straight to stderr unless
a client is given a Python ``logger``; then confluent-kafka hands each line to that logger when
the client is polled, and it goes wherever and at whatever level logging is configured. The
logger object cannot cross into Spark tasks (it does not pickle), so it is added here, where
each client is built, never to a configuration that travels.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

LIBRDKAFKA = logging.getLogger("librdkafka")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def with_logger(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` plus the ``logger`` that routes librdkafka's lines into Python logging."""
    ensure_logging()
    return {**conf, "logger": LIBRDKAFKA}


def assigned_consumer(client_config: Mapping[str, Any], **overrides: Any) -> Any:
    """A consumer of explicitly assigned partitions (no group membership, nothing committed)
    that reports the end of each partition; ``client_config`` wins over every default."""
    from confluent_kafka import Consumer

    conf = {
        "group.id": "kafka-lake-compactor",  # required by librdkafka; never committed to
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
        # librdkafka >= 2.4 waits this long before fetching again once its queue holds
        # queued.min.messages (default 1000 ms); a reader drains the queue far sooner.
        "fetch.queue.backoff.ms": 10,
        **overrides,
        **client_config,
    }
    return Consumer(with_logger(conf))


def ensure_logging() -> None:
    """In a process nobody configured logging in (a Spark Python worker), log warnings and
    errors to stderr in the CLI's format; the driver's configuration is left alone."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
        root.setLevel(logging.WARNING)


def request_timeout_s(conf: Mapping[str, Any], default_s: float) -> float:
    """How long one request to the cluster may wait: ``socket.timeout.ms`` when the user set it
    (``kafka.socket.timeout.ms``, which also stands for the Java client's
    ``default.api.timeout.ms``), else ``default_s``."""
    value = conf.get("socket.timeout.ms")
    return int(value) / 1000 if value is not None else default_s
