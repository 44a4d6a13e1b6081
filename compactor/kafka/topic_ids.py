"""Topic ids (KIP-516), asked of the cluster by a child process that answers with the ids only.

confluent-kafka answers ``describe_topics`` with a Python object for every partition and for
each of its leader, replicas and in-sync replicas, built on librdkafka's thread under Python's
lock. The mirror asks for the ids of its topics on every micro-batch while it stages that
batch's commits, so at hundreds of partitions the answer took the lock from the micro-batch
again and again. A child process (``python -m compactor.kafka.topic_ids``) asks instead and
sends back one line: each topic's id or why it has none.

Protocol over the child's stdin and stdout, one JSON object a line:

1. The parent starts the child and sends the client configuration and the request timeout.
2. Per request the parent sends a sequence number and topics; the child asks the cluster and
   answers with the same number, the ids and the errors. A parent that gave up on a request
   skips answers of numbers before the one it waits for.
3. The parent closing stdin (or dying) ends the child; signals to the parent's process group
   do not reach it. When the child is gone or does not answer within the timeout, the parent
   asks in process for that request and starts a new child for the next one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from compactor.kafka.clients import with_logger

log = logging.getLogger(__name__)

# An answer: per topic its id ("" when the cluster has none), and per topic why it has none.
Answer = tuple[dict[str, str], dict[str, str]]
# How long past the request timeout the parent waits for the child before asking itself.
_GRACE_S = 10.0


def describe_ids(admin: Any, topics: list[str], timeout_s: float) -> Answer:
    """Each topic's id as the cluster reports it, and the error of each it could not describe."""
    from confluent_kafka import KafkaException, TopicCollection

    futures = admin.describe_topics(TopicCollection(topics), request_timeout=timeout_s)
    ids: dict[str, str] = {}
    errors: dict[str, str] = {}
    for topic in topics:
        try:
            topic_id = futures[topic].result().topic_id
        except KafkaException as exc:
            errors[topic] = str(exc)
            continue
        ids[topic] = str(topic_id) if topic_id is not None else ""
    return ids, errors


def _admin(client_config: Mapping[str, str]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(with_logger(client_config))


class TopicIds:
    """Asks for topic ids through the child process; one request at a time."""

    def __init__(self, client_config: Mapping[str, str], timeout_s: float) -> None:
        self._config = dict(client_config)
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._seq = 0
        self._local: Any = None  # the in-process client, made when the child fails

    def ask(self, topics: list[str]) -> Callable[[], Answer]:
        """Send the request for ``topics`` now; the returned function waits for the answer."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            try:
                child = self._running()
                assert child.stdin is not None
                child.stdin.write(json.dumps({"seq": seq, "topics": topics}).encode() + b"\n")
                child.stdin.flush()
            except OSError as exc:
                self._lost(f"cannot send it a request: {exc}")
                return lambda: self._ask_here(topics)
        return lambda: self._answer(seq, topics)

    def close(self) -> None:
        """End the child (it exits when its stdin closes)."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            _end(child)

    def _running(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            # -P: a folder of the user's own in the working directory (./compactor) is never
            # imported. A session of its own: a terminal's Ctrl-C or a signal to the run's
            # process group reaches the run, which ends the child, not the child mid-start.
            self._child = subprocess.Popen(
                [sys.executable, "-P", "-m", __name__], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, close_fds=True, start_new_session=True)
            self._buffer = b""
            assert self._child.stdin is not None
            self._child.stdin.write(json.dumps({"config": self._config,
                                                "timeout_s": self._timeout_s}).encode() + b"\n")
            self._child.stdin.flush()
        return self._child

    def _answer(self, seq: int, topics: list[str]) -> Answer:
        with self._lock:
            deadline = time.monotonic() + self._timeout_s + _GRACE_S
            while True:
                line = self._line(deadline)
                if line is None:
                    break
                reply = json.loads(line)
                if reply.get("seq") == seq:
                    return dict(reply["ids"]), dict(reply["errors"])
        return self._ask_here(topics)

    def _line(self, deadline: float) -> bytes | None:
        """The child's next line; None (the child given up on) when it is gone or late."""
        child = self._child
        if child is None or child.stdout is None:
            return None
        fd = child.stdout.fileno()
        waiter = select.poll()  # not select(): a driver's descriptors run past FD_SETSIZE
        waiter.register(fd, select.POLLIN)
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not waiter.poll(left * 1000):
                self._lost(f"no answer within {self._timeout_s + _GRACE_S:.0f} s")
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self._lost(f"it exited with code {child.wait()}")
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _lost(self, why: str) -> None:
        log.warning("the process that asks the cluster for topic ids failed (%s); asking in "
                    "this process, and starting it again for the next request", why)
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            _end(child)

    def _ask_here(self, topics: list[str]) -> Answer:
        if self._local is None:
            self._local = _admin(self._config)
        return describe_ids(self._local, topics, self._timeout_s)


def _end(child: subprocess.Popen[bytes]) -> None:
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def main() -> None:
    """The child: answer each request line on stdin with one line on stdout until stdin ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we end
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the answers
    first = sys.stdin.readline()
    if not first:
        return
    setup = json.loads(first)
    admin = _admin(setup["config"])
    for line in sys.stdin:
        request = json.loads(line)
        ids, errors = describe_ids(admin, request["topics"], float(setup["timeout_s"]))
        out.write(json.dumps({"seq": request["seq"], "ids": ids, "errors": errors}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
