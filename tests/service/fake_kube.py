"""A tiny in-process Kubernetes API server: list and watch (with 410 Gone) for the kinds the
inventory reads, enough to drive the real ``kubernetes`` client in tests."""

from __future__ import annotations

import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

PATHS = {
    "/apis/resource.k8s.io/v1/deviceclasses": "DeviceClass",
    "/apis/resource.k8s.io/v1/resourceslices": "ResourceSlice",
    "/apis/resource.k8s.io/v1/resourceclaims": "ResourceClaim",
    "/apis/resource.k8s.io/v1alpha3/devicetaintrules": "DeviceTaintRule",
    "/api/v1/nodes": "Node",
}


class FakeKube:
    """Objects by kind; every change bumps the resourceVersion and reaches open watches."""

    def __init__(self, *, served: set[str] | None = None) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in PATHS.values()}
        self.served = served if served is not None else set(PATHS.values())
        self.rv = 1
        self.compacted = 0
        self.lock = threading.Lock()
        self.watchers: list[tuple[str, queue.Queue[dict[str, Any] | None]]] = []
        self.requests: list[str] = []
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeKube:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.lock:
            for _, q in self.watchers:
                q.put(None)
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def put(self, obj: dict[str, Any], *, notify: bool = True) -> None:
        kind = obj["kind"]
        with self.lock:
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            etype = "MODIFIED" if self._key(obj) in self.objects[kind] else "ADDED"
            self.objects[kind][self._key(obj)] = obj
            if notify:
                self._send(kind, {"type": etype, "object": obj})

    def delete(self, kind: str, name: str, namespace: str = "", *, notify: bool = True) -> None:
        with self.lock:
            self.rv += 1
            obj = self.objects[kind].pop(f"{namespace}/{name}")
            obj["metadata"]["resourceVersion"] = str(self.rv)
            if notify:
                self._send(kind, {"type": "DELETED", "object": obj})

    def compact(self) -> None:
        """Forget history: watches from older versions get 410 Gone; open watches end."""
        with self.lock:
            self.compacted = self.rv
            for _, q in self.watchers:
                q.put(None)

    def _send(self, kind: str, event: dict[str, Any]) -> None:
        for k, q in self.watchers:
            if k == kind:
                q.put(event)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # Watches stream with chunked encoding, as the API server does: the client yields
            # events per chunk (a plain close-delimited body would be buffered).
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                fake.requests.append(self.path)
                kind = PATHS.get(url.path)
                if kind is None or kind not in fake.served:
                    self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "the server could not find the requested resource"})
                    return
                query = parse_qs(url.query)
                if query.get("watch", ["false"])[0] in ("true", "1"):
                    self._watch(kind, int(query.get("resourceVersion", ["0"])[0] or 0), float(query.get("timeoutSeconds", ["30"])[0]))
                    return
                with fake.lock:
                    items = [fake.objects[kind][k] for k in sorted(fake.objects[kind])]
                    body = {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {"resourceVersion": str(fake.rv)}, "items": items}
                self._json(200, body)

            def _json(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _watch(self, kind: str, since: int, timeout: float) -> None:
                q: queue.Queue[dict[str, Any] | None] = queue.Queue()
                with fake.lock:
                    gone = since < fake.compacted
                    if not gone:
                        fake.watchers.append((kind, q))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self._events(kind, q, gone=gone, since=since, timeout=timeout)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with fake.lock:
                        fake.watchers[:] = [(k, w) for k, w in fake.watchers if w is not q]
                self.close_connection = True

            def _events(self, kind: str, q: queue.Queue[dict[str, Any] | None], *, gone: bool, since: int, timeout: float) -> None:
                if gone:
                    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410, "message": f"too old resource version: {since} ({fake.compacted})"}
                    self._line({"type": "ERROR", "object": status})
                    return
                deadline = time.monotonic() + timeout
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        event = q.get(timeout=min(left, 0.5))
                    except queue.Empty:
                        continue
                    if event is None:
                        return
                    self._line(event)

            def _line(self, event: dict[str, Any]) -> None:
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        return Handler
