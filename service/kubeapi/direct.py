"""Writes sent over connections of our own, and JSON through orjson.

The ``kubernetes`` client sends every request through urllib3's pool manager and encodes
bodies with the standard ``json`` module: together about 0.3 ms of the sending thread's CPU per
write, which the scheduler and the claim controller pay on every claim update, status update,
binding and Event (about 17,000 writes in the 5,000-pod backlog of docs/comparing.md). Requests
still come from the typed methods' own request builders (path, query, authentication,
User-Agent and content type); only the sending is ours: one persistent HTTP/1.1 connection per
concurrent writer, TLS as the client's configuration says (CA, client certificate,
``verify_ssl``, ``tls_server_name``), the same timeouts and status mapping. The exchange itself
is a minimal HTTP/1.1 client (:class:`_Connection`): ``http.client`` parsed every answer's
headers with the e-mail parser, a third of a write's Python time once urllib3 was gone.

A configuration this module does not reproduce (a proxy in the way, custom socket options or
TCP keep-alive, urllib3 retry settings, ``assert_hostname``) or cannot load (a CA or key file it cannot read)
keeps urllib3: :meth:`Transport.for_config` returns None and the caller sends as before,
with urllib3's errors.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson


def dumps(doc: Any) -> bytes:
    """JSON bytes of ``doc``; the standard encoder where orjson refuses (integers beyond 64
    bits, non-string keys), so what one accepts the other does too."""
    try:
        return orjson.dumps(doc)
    except TypeError:
        return json.dumps(doc).encode()


_DIGITS = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))
_LONG_NUMBER = b"0" * 19
"""Nineteen digits in a row: maybe an integer beyond 64 bits (signed or not), which orjson reads as a float."""


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The document in ``data``, read as the standard decoder reads it, faster.

    orjson refuses numbers out of double range (the standard decoder reads infinity) and reads
    integers beyond 64 bits as floats, which would change an opaque configuration parameter
    written back in the next update: documents with either go to the standard decoder."""
    if isinstance(data, str):
        try:
            raw = data.encode()
        except UnicodeEncodeError:  # a lone surrogate: only the standard decoder takes it
            return json.loads(data)
    elif isinstance(data, bytes):
        raw = data
    elif isinstance(data, bytearray | memoryview):
        raw = bytes(data)
    else:
        raise TypeError(f"the JSON document must be str or bytes, not {type(data).__name__}")
    if _LONG_NUMBER in raw.translate(_DIGITS):
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    reason: str
    data: bytes
    retry_after: str | None


_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
"""What a kept-alive connection the server has closed meanwhile raises before any answer."""

_MAX_LINE = 65536
_MAX_HEADERS = 100
"""Bounds on an answer's status and header lines (as ``http.client``'s)."""


class _Connection:
    """One HTTP/1.1 connection: a request written in one piece, its answer read whole."""

    def __init__(self, sock: socket.socket, host_header: str) -> None:
        self.sock: socket.socket | None = sock
        self._host_header = host_header
        self._reader = sock.makefile("rb")

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            self._reader.close()
            sock.close()

    def exchange(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> Reply:
        sock = self.sock
        if sock is None:
            raise http.client.RemoteDisconnected("connection closed")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = "\r\n".join(lines)
        breaks = len(lines) - 1
        if head.count("\r") != breaks or head.count("\n") != breaks or "\0" in head:
            raise ValueError(f"a line break or NUL in the request line or headers of {method} {target[:200]}")
        sock.sendall(head.encode("latin-1") + b"\r\n\r\n" + (body or b""))
        return self._answer(method)

    def _answer(self, method: str) -> Reply:
        while True:
            version, status, reason = self._status_line()
            fields = self._headers()
            if not 100 <= status < 200:
                break
        chunked = "chunked" in fields.get("transfer-encoding", "").lower()
        length = fields.get("content-length")
        close = "close" in fields.get("connection", "").lower() or (version == "HTTP/1.0" and "keep-alive" not in fields.get("connection", "").lower())
        if method == "HEAD" or status in (204, 304):
            data = b""
        elif chunked:
            data = self._chunked()
        elif length is not None:
            try:
                size = int(length)
            except ValueError:
                raise http.client.HTTPException(f"invalid Content-Length {length[:40]!r}") from None
            if size < 0:
                raise http.client.HTTPException(f"invalid Content-Length {length[:40]!r}")
            data = self._exactly(size)
        else:  # the answer ends where the connection does
            data = self._reader.read()
            close = True
        if close:
            self.close()
        return Reply(status, reason, data, fields.get("retry-after"))

    def _status_line(self) -> tuple[str, int, str]:
        line = self._reader.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("the server closed the connection without an answer")
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("status line")
        parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit() or len(parts[1]) != 3:
            raise http.client.BadStatusLine(line[:200].decode("latin-1"))
        return parts[0], int(parts[1]), parts[2] if len(parts) > 2 else ""

    def _headers(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        for _ in range(_MAX_HEADERS + 1):
            line = self._reader.readline(_MAX_LINE + 1)
            if len(line) > _MAX_LINE:
                raise http.client.LineTooLong("header line")
            if line in (b"\r\n", b"\n", b""):
                if not line:
                    raise http.client.IncompleteRead(b"")
                return fields
            name, sep, value = line.decode("latin-1").partition(":")
            if sep:
                key = name.strip().lower()
                value = value.strip()
                fields[key] = f"{fields[key]}, {value}" if key in fields else value
        raise http.client.HTTPException(f"more than {_MAX_HEADERS} header lines")

    def _exactly(self, size: int) -> bytes:
        data = self._reader.read(size)
        if len(data) < size:
            raise http.client.IncompleteRead(data, size - len(data))
        return data

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            line = self._reader.readline(_MAX_LINE + 1)
            if not line or len(line) > _MAX_LINE:
                raise http.client.IncompleteRead(b"".join(parts))
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise http.client.HTTPException(f"invalid chunk size {line[:40]!r}") from None
            if size == 0:
                self._headers()  # trailers, if any
                return b"".join(parts)
            parts.append(self._exactly(size))
            self._exactly(2)  # the chunk's CRLF


class Transport:
    """Connections to one API server, each used by one request at a time."""

    def __init__(self, *, host: str, port: int, host_header: str, origin: str,
                 context: ssl.SSLContext | None, server_name: str, timeout: tuple[float, float], idle: int) -> None:
        self.origin = origin
        self._host = host
        self._port = port
        self._host_header = host_header
        self._context = context
        self._server_name = server_name
        self._connect_timeout, self._read_timeout = timeout
        self._max_idle = max(1, idle)
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def for_config(cls, cfg: Any, *, timeout: tuple[float, float], proxied: bool) -> Transport | None:
        """A transport for a ``kubernetes.client.Configuration``, or None where only urllib3
        does what it asks for. ``proxied``: requests to the server go through ``cfg.proxy``
        (the client's own reading of ``no_proxy`` says so)."""
        if proxied:
            return None
        if cfg.socket_options is not None or getattr(cfg, "keep_alive", False):
            return None
        if cfg.retries is not None or cfg.assert_hostname is not None:
            return None
        parts = urlsplit(cfg.host)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None:
            return None
        try:
            port = parts.port
        except ValueError:
            return None
        try:
            context = _tls_context(cfg) if parts.scheme == "https" else None
        except (OSError, ValueError):  # an unreadable CA or key: urllib3 says so on each request
            return None
        origin = f"{parts.scheme}://{parts.netloc}"
        return cls(host=parts.hostname, port=port or (443 if context else 80), host_header=parts.netloc, origin=origin,
                   context=context, server_name=cfg.tls_server_name or parts.hostname, timeout=timeout,
                   idle=cfg.connection_pool_maxsize or 4)

    def request(self, method: str, url: str, headers: dict[str, str], body: bytes | None) -> Reply:
        """Send one request to ``url`` (an address on this server, as the request builders
        make them) and read the whole answer. Connection failures raise ``OSError`` or
        ``http.client.HTTPException``; any HTTP status is a :class:`Reply`."""
        if not url.startswith(self.origin):
            raise ValueError(f"{url} is not on {self.origin}")
        target = url[len(self.origin):] or "/"
        conn, reused = self._checkout()
        try:
            try:
                reply = conn.exchange(method, target, headers, body)
            except _STALE:
                if not reused:
                    raise
                # The server closed the kept-alive connection as it was picked: once more on a new one.
                conn.close()
                conn = self._connect()
                reply = conn.exchange(method, target, headers, body)
        except BaseException:
            conn.close()
            raise
        self._checkin(conn)
        return reply

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def idle_connections(self) -> int:
        with self._lock:
            return len(self._idle)

    def _checkout(self) -> tuple[_Connection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(), False
            if _usable(conn):
                return conn, True
            conn.close()

    def _checkin(self, conn: _Connection) -> None:
        if conn.sock is None:  # closed: the server said so, or a failure
            return
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def _connect(self) -> _Connection:
        sock = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock = self._context.wrap_socket(sock, server_hostname=self._server_name)
            sock.settimeout(self._read_timeout)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock, self._host_header)


def _usable(conn: _Connection) -> bool:
    """An idle connection with nothing to read: anything readable now is the server's close."""
    sock = conn.sock
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def _tls_context(cfg: Any) -> ssl.SSLContext:
    ca_data = cfg.ca_cert_data
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None, cadata=ca_data or None)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    return context
