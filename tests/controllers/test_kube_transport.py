"""Writes over the client layer's own connections (service/kubeapi/direct.py) and its JSON.

Against the real kube-apiserver (TLS with its own CA, client certificates): writes take the
direct transport and never urllib3, keep one connection per concurrent writer, map the
server's errors like every other request, and keep numbers the fast decoder would change. The
connection faults a healthy server does not produce on cue (an idle connection closed under
the client, a connection closed as a request arrives, 429 with Retry-After on a write) come
from small local servers.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dra_solver.controllers import objects as ob
from dra_solver.service.kubeapi import client as kube
from dra_solver.service.kubeapi import direct
from tests import builders as b
from tests.controllers.conftest import Env, FaultServer
from tests.realkube import KubeCluster

BIG = 123456789012345678901234567890


@pytest.fixture
def cluster(kube_cluster: KubeCluster) -> Env:
    return Env(kube_cluster, None)


def test_writes_take_the_direct_transport_and_reuse_its_connection(cluster: Env) -> None:
    api = kube.api_client(kubeconfig=cluster.kc.kubeconfig, user_agent="dra-solver-controllers/transport")
    k = kube.Kube(api)
    assert k.transport is not None and k.transport.origin.startswith("https://")
    created = k.create_claim("default", b.ONE_GPU.named("direct").obj())
    created["metadata"]["labels"] = {"written": "directly"}
    updated = k.update_claim(created)
    assert updated["metadata"]["labels"] == {"written": "directly"}
    with pytest.raises(kube.Conflict, match="has been modified") as stale:
        k.update_claim(created)
    assert stale.value.status == 409 and stale.value.reason == "Conflict"
    with pytest.raises(kube.Invalid) as invalid:
        k.create_claim("default", b.ONE_GPU.named("Not_A_Name").obj())
    assert invalid.value.status == 422 and invalid.value.reason == "Invalid"
    k.delete_claim("default", "direct", uid=ob.uid(created))
    with pytest.raises(kube.NotFound, match='"direct" not found'):
        k.delete_claim("default", "direct", uid=ob.uid(created))
    assert api.rest_client.pool_manager.pools.keys() == set(), "no write went through urllib3"
    assert k.transport.idle_connections() == 1, "one writer at a time: one kept-alive connection"


def test_concurrent_writers_each_keep_a_connection(cluster: Env) -> None:
    k = kube.Kube(kube.api_client(kubeconfig=cluster.kc.kubeconfig, connections=4))
    assert k.transport is not None
    ready = threading.Barrier(6)
    errors: list[BaseException] = []

    def write(i: int) -> None:
        ready.wait()
        try:
            for j in range(5):
                k.create_event("default", {
                    "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"w{i}-{j}.", "namespace": "default"},
                    "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "Test", "type": "Normal",
                })
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert 1 <= k.transport.idle_connections() <= 4, "idle connections are kept up to the pool size, the rest closed"


def test_numbers_beyond_64_bits_survive_a_read_and_write_back(cluster: Env) -> None:
    k = kube.Kube(kube.api_client(kubeconfig=cluster.kc.kubeconfig))
    claim = b.ONE_GPU.named("bignum").obj()
    params = {"apiVersion": "example.com/v1", "kind": "Params", "serial": BIG, "huge": 2**64 + 1}
    claim["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": "gpu.example.com", "parameters": params}}]
    created = k.create_claim("default", claim)
    got = k.get_claim("default", ob.name(created))
    got["metadata"]["labels"] = {"touched": "yes"}
    k.update_claim(got)
    again = k.get_claim("default", ob.name(created))
    assert again["spec"]["devices"]["config"][0]["opaque"]["parameters"] == params
    assert isinstance(again["spec"]["devices"]["config"][0]["opaque"]["parameters"]["serial"], int)


@pytest.mark.parametrize("text", [
    '{"a": 123456789012345678901234567890}', '{"a": [18446744073709551616, -9223372036854775809]}', '{"a": 1e400}',
    '{"a": NaN, "b": -Infinity}', '{"a": "\\ud800"}', '{"a": 18446744073709551615, "b": 1.5, "c": "é"}', "[]",
])
def test_loads_reads_what_the_standard_decoder_reads(text: str) -> None:
    for data in (text, text.encode()):
        got, want = direct.loads(data), json.loads(text)
        assert repr(got) == repr(want), data  # repr: nan != nan, and 1 == 1.0 would hide a float


def test_loads_refuses_what_the_standard_decoder_refuses() -> None:
    for bad in (b"", b"{", b"{'a': 1}", b"\xff"):
        with pytest.raises(ValueError):
            direct.loads(bad)
    with pytest.raises(TypeError, match="must be str or bytes, not int"):
        direct.loads(12)  # type: ignore[arg-type]
    assert direct.loads(bytearray(b'{"a": 1}')) == direct.loads(memoryview(b'{"a": 1}')) == {"a": 1}


def test_dumps_writes_what_the_standard_encoder_writes() -> None:
    for doc in ({"a": BIG, "b": -(2**70)}, {"a": [1, 2.5, None, True, "é\n"]}, {1: "int key"}):
        assert json.loads(direct.dumps(doc)) == json.loads(json.dumps(doc))
    with pytest.raises(TypeError):
        direct.dumps({"a": {1, 2}})
    assert math.isinf(direct.loads(b"[1e400]")[0])


# --- faults the real server does not give on cue ----------------------------------------------


@pytest.fixture
def faults() -> Iterator[FaultServer]:
    server = FaultServer(verbs=("POST", "PUT", "PATCH", "DELETE"), keep_alive=True, otherwise=(200, {}),
                         ok_body=b'{"kind":"Event","metadata":{"name":"e"},"count":18446744073709551617}')
    yield server
    server.stop()


EVENT = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "p.", "namespace": "default"}, "reason": "Test"}


def test_write_errors_map_with_the_servers_retry_after(faults: FaultServer) -> None:
    k = kube.Kube(kube.api_client(host=faults.host))
    assert k.transport is not None
    faults.answers.append((429, {"Retry-After": "3"}))
    with pytest.raises(kube.Transient, match="create event in default: injected") as throttled:
        k.create_event("default", EVENT)
    assert throttled.value.status == 429 and throttled.value.delay == 3.0
    faults.answers.append((503, {}))
    with pytest.raises(kube.Transient) as unavailable:
        k.create_event("default", EVENT)
    assert unavailable.value.status == 503 and unavailable.value.delay == 0
    faults.answers.append((409, {}))
    with pytest.raises(kube.Conflict, match="injected"):
        k.create_event("default", EVENT)
    assert k.create_event("default", EVENT)["count"] == 18446744073709551617
    assert [(m, p, t) for m, p, t, _ in faults.bodies] == [("POST", "/api/v1/namespaces/default/events", "application/json")] * 4
    assert json.loads(faults.bodies[0][3]) == EVENT
    assert k.transport.idle_connections() == 1, "errors answered in full keep the connection"
    dead = kube.Kube(kube.api_client(host="http://127.0.0.1:1"))
    with pytest.raises(kube.Transient, match="ConnectionRefusedError"):
        dead.create_event("default", EVENT)


def test_a_success_that_is_not_json_is_invalid_and_urllib3_answers_map_alike() -> None:
    server = FaultServer(verbs=("POST",), keep_alive=True, otherwise=(200, {}), ok_body=b"<html>a proxy's page</html>")
    try:
        k = kube.Kube(kube.api_client(host=server.host))
        assert k.transport is not None
        with pytest.raises(kube.Invalid, match=r"^create event in default: "):
            k.create_event("default", EVENT)
        k.transport = None  # urllib3's way
        with pytest.raises(kube.Invalid, match=r"^create event in default: "):
            k.create_event("default", EVENT)
        server.answers.append((429, {"Retry-After": "2"}))
        with pytest.raises(kube.Transient, match="create event in default: injected") as throttled:
            k.create_event("default", EVENT)
        assert throttled.value.status == 429 and throttled.value.delay == 2.0
        assert len(server.requests) == 3
    finally:
        server.stop()


class RawServer:
    """A listening socket that hands each connection to ``_handle`` on its own thread."""

    def __init__(self) -> None:
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.host = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.listener.close()


class Closer(RawServer):
    """Answers the first ``answered`` requests on each connection; then, with ``close_idle``,
    closes the connection (the server's idle timeout, seen by the client before the next
    request); otherwise reads the next request and closes without answering (the same close,
    racing the request)."""

    def __init__(self, *, close_idle: bool, answered: int = 1) -> None:
        self.answered = answered
        self.requests = 0
        self.close_idle = close_idle
        super().__init__()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            for n in range(self.answered + 1):
                if not self._read_request(conn):
                    return
                self.requests += 1
                if n == self.answered:
                    return  # closed unanswered
                body = b'{"kind":"Event"}'
                conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                if self.close_idle:
                    return

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
        while len(rest) < length:
            rest += conn.recv(65536)
        return True


@pytest.mark.parametrize("close_idle", [True, False], ids=["closed-while-idle", "closed-as-the-request-arrives"])
def test_a_connection_the_server_closed_is_replaced(close_idle: bool) -> None:
    server = Closer(close_idle=close_idle)
    try:
        k = kube.Kube(kube.api_client(host=server.host))
        assert k.transport is not None
        k.create_event("default", EVENT)
        if close_idle:  # the server's close is seen before the next request is sent on it
            [idle] = k.transport._idle
            deadline = time.monotonic() + 5
            while direct._usable(idle) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not direct._usable(idle)
        assert k.create_event("default", EVENT) == {"kind": "Event"}
        assert server.connections == 2
        # Closed while idle: seen before sending, so the request is sent once; closed as it
        # arrived: sent again, once, on a new connection.
        assert server.requests == (2 if close_idle else 3)
    finally:
        server.stop()


def test_a_new_connection_closed_unanswered_is_an_error_not_a_retry() -> None:
    server = Closer(close_idle=False, answered=0)
    try:
        k = kube.Kube(kube.api_client(host=server.host))
        with pytest.raises(kube.Transient, match="RemoteDisconnected"):
            k.create_event("default", EVENT)
        assert (server.connections, server.requests) == (1, 1), "sent once: the server may have acted on it"
    finally:
        server.stop()


def test_configurations_only_urllib3_reproduces_keep_it() -> None:
    cfg = kube.api_client(host="https://127.0.0.1:6443").configuration
    assert kube.transport_for(cfg) is not None
    cfg.proxy = "http://proxy.example:3128"
    assert kube.transport_for(cfg) is None
    cfg.no_proxy = "127.0.0.0/8"
    assert kube.transport_for(cfg) is not None, "no_proxy bypasses the proxy for this server"
    cfg.proxy = None
    cfg.assert_hostname = "other.example"
    assert kube.transport_for(cfg) is None
    cfg.assert_hostname = None
    cfg.socket_options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    assert kube.transport_for(cfg) is None
    cfg.socket_options = None
    cfg.keep_alive = True
    assert kube.transport_for(cfg) is None
    cfg.keep_alive = False
    cfg.host = "https://[::1]:6443/k8s/clusters/c-1"
    transport = kube.transport_for(cfg)
    assert transport is not None and transport.origin == "https://[::1]:6443"


def test_writes_through_a_proxy_stay_with_urllib3(faults: FaultServer) -> None:
    api = kube.api_client(host="http://api.invalid:6443")
    api.configuration.proxy = faults.host  # plain HTTP through a forward proxy: the request line names the server
    api.rest_client = type(api.rest_client)(api.configuration)
    k = kube.Kube(api)
    assert k.transport is None
    k.create_event("default", EVENT)
    assert faults.bodies[-1][1] == "http://api.invalid:6443/api/v1/namespaces/default/events"


def test_credentials_that_do_not_load_keep_urllib3_and_its_errors(tmp_path: Any) -> None:
    api = kube.api_client(host="https://127.0.0.1:1")
    api.configuration.ssl_ca_cert = str(tmp_path / "missing-ca.crt")
    k = kube.Kube(api)
    assert k.transport is None
    with pytest.raises(kube.Transient):
        k.create_event("default", EVENT)


def test_a_server_address_with_a_path_keeps_it(faults: FaultServer) -> None:
    k = kube.Kube(kube.api_client(host=f"{faults.host}/k8s/clusters/c-1"))
    k.create_event("default", EVENT)
    assert faults.bodies[-1][:2] == ("POST", "/k8s/clusters/c-1/api/v1/namespaces/default/events")


class Scripted(RawServer):
    """Answers each request with the next raw answer of ``script`` (bytes as sent on the
    wire), closing the connection after the ones marked so: the answers a real API server
    gives in some forms only (chunked, ``100 Continue``), or never (broken ones)."""

    def __init__(self, script: list[tuple[bytes, bool]]) -> None:
        self.script = script
        self.requests: list[bytes] = []
        super().__init__()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while self.script:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                while len(data) < length:
                    data += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + data[:length])
                data = data[length:]
                answer, close = self.script.pop(0)
                conn.sendall(answer)
                if close:
                    return


def _scripted(script: list[tuple[bytes, bool]]) -> tuple[Scripted, kube.Kube]:
    server = Scripted(script)
    return server, kube.Kube(kube.api_client(host=server.host, user_agent="dra-solver-test/1"))


def test_answers_in_every_form_http_allows() -> None:
    server, k = _scripted([
        (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
         b"5\r\n{\"a\":\r\n3;ext=1\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n", False),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{\"b\":2}", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\n{\"c\":3}", True),
        (b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"d\":4}", True),
        (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"e\":5}", False),
    ])
    try:
        assert k.transport is not None
        assert k.create_event("default", EVENT) == {"a": 1}
        assert k.create_event("default", EVENT) == {"b": 2}
        assert server.connections == 1, "a chunked answer read to its end keeps the connection"
        assert k.create_event("default", EVENT) == {"c": 3}
        assert k.transport.idle_connections() == 0, "Connection: close is honoured"
        assert k.create_event("default", EVENT) == {"d": 4}, "no length: the answer ends with the connection"
        with pytest.raises(kube.Transient, match="Too Many Requests") as throttled:
            k.create_event("default", EVENT)
        assert throttled.value.status == 429 and throttled.value.delay == 2.0
        assert k.create_event("default", EVENT) == {}, "204: no body, and none read"
        assert k.create_event("default", EVENT) == {"e": 5}, "the connection stays in step after a 204"
        assert server.connections == 3
        first = server.requests[0]
        head, _, body = first.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        assert lines[0] == b"POST /api/v1/namespaces/default/events HTTP/1.1"
        assert f"Host: {server.host.removeprefix('http://')}".encode() in lines
        assert b"User-Agent: dra-solver-test/1" in lines and b"Content-Type: application/json" in lines
        assert f"Content-Length: {len(body)}".encode() in lines and json.loads(body) == EVENT
    finally:
        server.stop()


@pytest.mark.parametrize("answer", [
    b"garbage\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n",
    b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70000 + b"\r\n\r\n",
    b"HTTP/1.1 200 " + b"O" * 70000 + b"\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2",
], ids=["status-line", "short-body", "negative-length", "chunk-size", "header-count", "header-length", "status-length",
        "headers-cut-short"])
def test_a_broken_answer_is_a_transient_error_and_the_connection_dropped(answer: bytes) -> None:
    server, k = _scripted([(answer, True), (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", False)])
    try:
        with pytest.raises(kube.Transient):
            k.create_event("default", EVENT)
        assert k.transport is not None and k.transport.idle_connections() == 0
        assert k.create_event("default", EVENT) == {}
    finally:
        server.stop()


def test_line_breaks_in_headers_are_refused_before_sending() -> None:
    server = Scripted([(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", False)])
    try:
        transport = kube.transport_for(kube.api_client(host=server.host).configuration)
        assert transport is not None
        for headers, target in (({"X-A": "a\r\nX-Injected: 1"}, "/x"), ({"X-A": "a\nb"}, "/x"), ({}, "/x HTTP/1.1\r\nX: 1\r\n")):
            with pytest.raises(ValueError, match="line break"):
                transport.request("POST", f"{server.host}{target}", headers, b"{}")
        with pytest.raises(ValueError, match="is not on"):
            transport.request("POST", "http://elsewhere.example/x", {}, b"{}")
        assert server.requests == []
        assert transport.request("POST", f"{server.host}/x", {"X-A": "fine"}, b"{}").status == 200
    finally:
        server.stop()
