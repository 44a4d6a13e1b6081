"""The metrics port's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

For container orchestrators: ``/healthz`` answers 200 while the mirror's streaming query is
running (a liveness probe restarts a process whose query died), ``/readyz`` answers 200 while
the mirror keeps up (see :meth:`compactor.ops.metrics.Metrics.readiness`). Both answer 503 with
the reason otherwise, as one line of text.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from compactor.exceptions import ConfigError

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, str]]


def serve(port: int, registry: CollectorRegistry, healthz: Probe,
          readyz: Probe) -> ThreadingHTTPServer:
    """Serve the three endpoints on ``port`` (all interfaces) from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, why = (healthz if path == "/healthz" else readyz)()
                self._answer(200 if ok else 503, f"{why}\n".encode(), "text/plain; charset=utf-8")
            else:
                self._answer(404, b"try /metrics, /healthz or /readyz\n",
                             "text/plain; charset=utf-8")

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            log.debug("%s " + format, self.address_string(), *args)

    try:
        server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    except OSError as exc:
        raise port_error(port, exc) from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def port_error(port: int, exc: OSError) -> ConfigError:
    return ConfigError("metrics.port", port, f"cannot listen on it: {exc.strerror} "
                       f"[errno {exc.errno}]", "another process holds it; choose a free port "
                       "or 0 to turn the metrics off")


def check_port(port: int) -> None:
    """Refuse, before anything starts, a metrics port this machine cannot listen on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As http.server binds: a port left in TIME_WAIT by a previous run is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            raise port_error(port, exc) from exc
