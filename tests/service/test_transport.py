"""Listeners and security: unix sockets, TLS, mutual TLS (a client without a valid certificate
is refused), and the loopback-only plaintext default of ``serve``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from dra_solver.service.client import Client
from dra_solver.service.reservations import ReservationStore
from dra_solver.service.tls import is_loopback, server_credentials
from tests import builders as b
from tests.service.conftest import Running

if TYPE_CHECKING:
    from tests.service.pki import Pki


def make_pki(directory: Path) -> Pki:
    pytest.importorskip("cryptography", reason="the TLS tests generate certificates with cryptography (test extra)")
    from tests.service.pki import make_pki as make

    return make(directory)


def test_unix_socket_listener(fresh: Callable[..., Running], tmp_path: Path) -> None:
    sock = tmp_path / "solver.sock"
    fresh(address=f"unix:{sock}")
    assert sock.exists()
    with Client(f"unix:{sock}", timeout=10) as client:
        assert client.health() == "SERVING"
        assert client.allocate([b.SOLVER_TEST.named("over-unix").request("gpu").obj()], "node-b").allocated


def test_tls(fresh: Callable[..., Running], tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    r = fresh(credentials=server_credentials(cert=str(pki.server_cert), key=str(pki.server_key)))
    target = f"localhost:{r.service.port}"
    with Client(target, tls_ca=str(pki.ca), timeout=10) as client:
        assert client.allocate([b.SOLVER_TEST.named("tls").request("gpu").obj()], "node-b").allocated
    with Client(target, timeout=3) as plain, pytest.raises(grpc.RpcError) as info:
        plain.inventory()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_refuses_clients_without_a_valid_certificate(fresh: Callable[..., Running], tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    r = fresh(credentials=server_credentials(cert=str(pki.server_cert), key=str(pki.server_key), client_ca=str(pki.ca)))
    target = f"localhost:{r.service.port}"
    with Client(target, tls_ca=str(pki.ca), tls_cert=str(pki.client_cert), tls_key=str(pki.client_key), timeout=10) as client:
        assert client.inventory().ready
    for cert, key in ((None, None), (pki.rogue_cert, pki.rogue_key)):
        with Client(target, tls_ca=str(pki.ca), tls_cert=str(cert) if cert else None, tls_key=str(key) if key else None, timeout=3) as c:
            with pytest.raises(grpc.RpcError) as info:
                c.inventory()
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def _reserve_one(client: Client, name: str) -> grpc.StatusCode:
    try:
        client.schedule([b.SOLVER_TEST.named(name).request("gpu").obj()], reserve=True, ttl=60)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def test_callers_are_told_apart_by_their_certificate_under_mutual_tls(fresh: Callable[..., Running], tmp_path: Path) -> None:
    """The per-caller reservation bound counts by the client certificate's common name: two
    schedulers on one host are two callers under mutual TLS, one caller in plaintext."""
    pki = make_pki(tmp_path)
    r = fresh(reservations=ReservationStore(max_per_caller=1),
              credentials=server_credentials(cert=str(pki.server_cert), key=str(pki.server_key), client_ca=str(pki.ca)))
    target = f"localhost:{r.service.port}"
    with (Client(target, tls_ca=str(pki.ca), tls_cert=str(pki.client_cert), tls_key=str(pki.client_key), timeout=10) as one,
          Client(target, tls_ca=str(pki.ca), tls_cert=str(pki.other_cert), tls_key=str(pki.other_key), timeout=10) as other):
        assert [_reserve_one(one, "a"), _reserve_one(one, "b")] == [grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED]
        assert _reserve_one(other, "c") == grpc.StatusCode.OK
    plain = fresh(reservations=ReservationStore(max_per_caller=1))
    with Client(f"127.0.0.1:{plain.service.port}", timeout=10) as second:
        assert [_reserve_one(plain.client, "a"), _reserve_one(second, "b")] == [grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED]


@pytest.mark.parametrize(
    ("host", "local"),
    [("127.0.0.1", True), ("::1", True), ("[::1]", True), ("localhost", True), ("unix:/tmp/s", True),
     ("0.0.0.0", False), ("10.0.0.1", False), ("::", False), ("example.com", False)],
)
def test_loopback_detection(host: str, local: bool) -> None:
    assert is_loopback(host) is local
