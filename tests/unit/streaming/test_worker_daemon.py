"""The worker daemon's hook: no TCP delay on a task's socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from streaming.worker_daemon import QUICKACK, without_tcp_delays


@pytest.fixture()
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two ends of a loopback TCP connection, as the daemon accepts one from the JVM."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    with client, accepted:
        yield accepted, client


@pytest.mark.skipif(QUICKACK is None, reason="TCP_QUICKACK is Linux's")
def test_a_task_starts_with_its_socket_without_tcp_delays(
        tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    sock, _ = tcp_pair
    assert QUICKACK is not None
    sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 0)  # as the kernel leaves it in a long task
    assert sock.getsockopt(socket.IPPROTO_TCP, QUICKACK) == 0
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
    seen = []

    def worker(task_sock: socket.socket, authenticated: bool) -> int:
        seen.append((task_sock.getsockopt(socket.IPPROTO_TCP, QUICKACK),
                     task_sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0,
                     authenticated))
        return 7

    assert without_tcp_delays(worker)(sock, True) == 7
    assert seen == [(1, True, True)]


def test_a_unix_socket_is_handed_to_the_worker_as_it_is() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        seen = []

        def worker(task_sock: socket.socket, authenticated: bool) -> int:
            seen.append((task_sock, authenticated))
            return 0

        assert without_tcp_delays(worker)(left, False) == 0
        assert seen == [(left, False)]
