"""The HTTP endpoint every dra-solver process serves: ``/metrics``, ``/healthz``, ``/readyz``.

prometheus-client's own server answers every path with the metrics page; this one answers
only ``/metrics`` with it (in the format the scraper asks for), ``/healthz`` with 200 while
the process serves HTTP at all (liveness), ``/readyz`` with 200 once the component says it is
ready and 503 with the reason until then (readiness), and 404 for anything else. The solver
service, the controllers and the kubelet plugin share it, so they behave alike for probes and
scrapers.

It also turns off prometheus-client's ``*_created`` series for the whole process: Prometheus
does not use them (it has no created-timestamp ingestion by default), and every counter and
histogram would otherwise show one more series than docs/metrics.md lists.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


def no_created_series() -> None:
    """Turn off the ``*_created`` series (process-wide; every metrics module calls this)."""
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]


no_created_series()

Readiness = Callable[[], str | None]
"""None when ready; else why not (shown by /readyz with status 503)."""

PATHS = ("/metrics", "/healthz", "/readyz")


def always_ready() -> str | None:
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    readiness: Readiness


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, encoder(self.server.registry), content_type, body=body)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8", body=body)
        elif path == "/readyz":
            reason = self._readiness()
            if reason is None:
                self._send(200, b"ok\n", "text/plain; charset=utf-8", body=body)
            else:
                self._send(503, f"not ready: {reason}\n".encode(), "text/plain; charset=utf-8", body=body)
        else:
            self._send(404, f"404 page not found: try {', '.join(PATHS)}\n".encode(), "text/plain; charset=utf-8", body=body)

    def _readiness(self) -> str | None:
        try:
            return self.server.readiness()
        except Exception as err:  # a readiness check that fails is "not ready", never a 500
            return f"readiness check failed: {type(err).__name__}: {err}"

    def _send(self, status: int, payload: bytes, content_type: str, *, body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes every 15 s: not worth a line
        pass


class HttpEndpoint:
    """The endpoint on ``address:port`` (port 0 picks a free one), served by a thread."""

    def __init__(self, registry: CollectorRegistry, *, address: str, port: int, readiness: Readiness = always_ready) -> None:
        host = address.strip("[]")
        self._server = (_Server6 if ":" in host else _Server)((host, port), _Handler)
        self._server.registry = registry
        self._server.readiness = readiness
        self.address = address
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-endpoint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
