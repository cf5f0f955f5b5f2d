"""A tiny in-process Kubernetes API server speaking only the REST calls the plugin makes.

Enough of the real server's behaviour to exercise the kube sink and claim source through the
real ``kubernetes`` client: list with field selectors, create (409 if it exists), update with
optimistic concurrency (409 on a stale resourceVersion), delete, get, Status objects for errors.
It records every request so tests can assert exactly which calls were made.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
_SLICE = re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices/([^/]+)$")
_CLAIM = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/]+)$")
_NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }


def _canonical(obj: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores: taint times in RFC 3339 UTC with "Z", like metav1.Time."""
    for device in (obj.get("spec") or {}).get("devices") or []:
        for taint in device.get("taints") or []:
            if taint.get("timeAdded"):
                parsed = datetime.datetime.fromisoformat(taint["timeAdded"].replace("Z", "+00:00"))
                taint["timeAdded"] = parsed.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return obj


def _field(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


class FakeApi:
    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._rv = 100
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _handle(self, method: str) -> None:
                url = urlparse(self.path)
                with api.lock:
                    api.requests.append((method, url.path))
                    code, body = api.route(
                        method,
                        url.path,
                        parse_qs(url.query),
                        self._body if method in ("POST", "PUT") else None,
                    )
                self._send(code, body)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeApi:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.host}}],
                    "users": [{"name": "fake", "user": {"token": "t"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # -- routing ----------------------------------------------------------------------------

    def route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, dict[str, Any]]:
        if path == SLICES and method == "GET":
            items = list(self.slices.values())
            for selector in query.get("fieldSelector", []):
                for term in unquote(selector).split(","):
                    key, _, want = term.partition("=")
                    items = [s for s in items if _field(s, key) == want]
            return 200, {
                "kind": "ResourceSliceList",
                "apiVersion": "resource.k8s.io/v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": [
                    {k: v for k, v in copy.deepcopy(s).items() if k not in ("kind", "apiVersion")}
                    for s in sorted(items, key=lambda s: s["metadata"]["name"])
                ],
            }
        if path == SLICES and method == "POST":
            obj = _canonical(body())
            name = obj["metadata"]["name"]
            if name in self.slices:
                return 409, _status(
                    409, "AlreadyExists", f'resourceslices.resource.k8s.io "{name}" already exists'
                )
            obj["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=self._next_rv())
            self.slices[name] = obj
            return 201, obj
        match = _SLICE.match(path)
        if match:
            name = match.group(1)
            current = self.slices.get(name)
            if current is None:
                return 404, _status(
                    404, "NotFound", f'resourceslices.resource.k8s.io "{name}" not found'
                )
            if method == "PUT":
                obj = _canonical(body())
                if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified")
                obj["metadata"].update(
                    uid=current["metadata"]["uid"], resourceVersion=self._next_rv()
                )
                self.slices[name] = obj
                return 200, obj
            if method == "DELETE":
                del self.slices[name]
                return 200, current
            if method == "GET":
                return 200, current
        match = _CLAIM.match(path)
        if match and method == "GET":
            claim = self.claims.get((match.group(1), match.group(2)))
            if claim is None:
                return 404, _status(
                    404, "NotFound", f'resourceclaims.resource.k8s.io "{match.group(2)}" not found'
                )
            return 200, claim
        match = _NODE.match(path)
        if match and method == "GET":
            node = self.nodes.get(match.group(1))
            if node is None:
                return 404, _status(404, "NotFound", f'nodes "{match.group(1)}" not found')
            return 200, node
        return 404, _status(404, "NotFound", f"no route for {method} {path}")
