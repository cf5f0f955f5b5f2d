"""A small keep-alive HTTPS client for the benchmark driver (admin credentials).

Creating thousands of pods through a fresh TLS connection each (``ControlPlane.request``) would
measure handshakes, not schedulers: each thread keeps one connection open here. A watch (pods, claims)
streams events on its own connection; the runner notes when each pod was first seen bound and
when each claim was allocated and released, on the same monotonic clock the creator used.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any


class HTTPError(Exception):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class Client:
    """Admin JSON requests over one connection per thread."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 443
        self.context = context
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=60)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(3):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.2)
                continue
            if (resp.status == 429 or resp.status >= 500) and attempt < 2:
                time.sleep(0.5)
                continue
            if resp.status >= 400:
                raise HTTPError(method, path, resp.status, raw.decode(errors="replace"))
            return json.loads(raw) if raw else None
        raise HTTPError(method, path, 503, "retries exhausted")

    def list_all(self, path: str) -> list[Any]:
        """Every item of a collection, following ``continue`` tokens."""
        items: list[Any] = []
        token = ""
        while True:
            sep = "&" if "?" in path else "?"
            page = self.request("GET", f"{path}{sep}limit=500" + (f"&continue={urllib.parse.quote(token)}" if token else ""))
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class Watch:
    """Watches a collection (``path``, e.g. ``/api/v1/namespaces/NS/pods``) from a
    resourceVersion and calls ``on_event(type, object, t)`` for each event (``t``:
    ``time.monotonic()`` when it arrived; events of one watch arrive in the server's order),
    re-watching after the server ends a stream."""

    def __init__(self, client: Client, path: str, resource_version: str,
                 on_event: Callable[[str, dict[str, Any], float], None]) -> None:
        self.client = client
        self.path = path
        self.what = path.rsplit("/", 1)[-1]
        self.rv = resource_version
        self.on_event = on_event
        self.error: str = ""
        self._stop = threading.Event()
        self._conn: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.what}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(2)
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = http.client.HTTPSConnection(self.client.host, self.client.port, context=self.client.context,
                                               timeout=None)
            self._conn = conn
            path = f"{self.path}?watch=true&timeoutSeconds=3600&resourceVersion={self.rv}&allowWatchBookmarks=true"
            try:
                conn.request("GET", path, headers={"Accept": "application/json"})
                resp = conn.getresponse()
                if resp.status != 200:
                    self.error = f"watch {self.what}: HTTP {resp.status}"
                    return
                self.error = ""
                while not self._stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    now = time.monotonic()
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        self.error = f"watch {self.what}: {obj.get('message', obj)}"
                        return
                    self.rv = (obj.get("metadata") or {}).get("resourceVersion") or self.rv
                    if event.get("type") != "BOOKMARK":
                        self.on_event(str(event.get("type")), obj, now)
            except (http.client.HTTPException, OSError, ValueError) as err:
                if not self._stop.is_set():
                    self.error = f"watch {self.what}: {err}"
                    time.sleep(0.2)
            finally:
                conn.close()
