"""A renewed certificate is served without a restart (cert-manager renews the Secret in place),
and a renewal that does not load keeps the previous certificate instead of breaking TLS."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from dra_solver.model.errors import InvalidInput
from dra_solver.service.client import Client
from dra_solver.service.tls import CertificateFiles, server_credentials
from tests.service.conftest import Running


def _pki(directory: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("cryptography", reason="the TLS tests generate certificates (test extra)")
    from tests.service.pki import make_pki

    directory.mkdir()
    return make_pki(directory)


def _install(live: Path, cert: Path, key: Path) -> None:
    """Swap both files in by rename, as the kubelet swaps a Secret volume's files."""
    for source, name in ((cert, "tls.crt"), (key, "tls.key")):
        shutil.copyfile(source, live / f".{name}.new")
        os.replace(live / f".{name}.new", live / name)


def _reaches(target: str, ca: Path) -> bool:
    with Client(target, tls_ca=str(ca), timeout=5) as client:
        try:
            client.inventory()
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.UNAVAILABLE
            return False
    return True


def test_a_renewed_certificate_is_served_to_new_connections(
    fresh: Callable[..., Running], tmp_path: Path
) -> None:
    old, new = _pki(tmp_path / "old"), _pki(tmp_path / "new")
    live = tmp_path / "live"
    live.mkdir()
    _install(live, old.server_cert, old.server_key)
    r = fresh(credentials=server_credentials(cert=str(live / "tls.crt"), key=str(live / "tls.key")))
    target = f"localhost:{r.service.port}"
    assert _reaches(target, old.ca) and not _reaches(target, new.ca)

    _install(live, new.server_cert, new.server_key)
    assert _reaches(target, new.ca) and not _reaches(target, old.ca)

    # Half a renewal (the new key with the old certificate) is refused; the last good pair stays.
    _install(live, old.server_cert, new.server_key)
    assert _reaches(target, new.ca)


def test_a_mismatched_pair_is_refused_at_start_naming_the_flag(tmp_path: Path) -> None:
    a, b = _pki(tmp_path / "a"), _pki(tmp_path / "b")
    with pytest.raises(InvalidInput, match="--tls-key"):
        CertificateFiles(cert=str(a.server_cert), key=str(b.server_key))


def test_a_file_missing_mid_swap_keeps_the_previous_certificate(tmp_path: Path) -> None:
    a, b = _pki(tmp_path / "a"), _pki(tmp_path / "b")
    live = tmp_path / "live"
    live.mkdir()
    _install(live, a.server_cert, a.server_key)
    files = CertificateFiles(cert=str(live / "tls.crt"), key=str(live / "tls.key"))
    first = files.current
    (live / "tls.key").unlink()
    assert files.fetch() is None and files.current is first and files.reloads == 0
    _install(live, b.server_cert, b.server_key)
    assert files.fetch() is not None and files.reloads == 1
