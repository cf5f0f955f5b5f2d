"""TLS for the gRPC endpoint: server credentials from PEM files, and the client side.

Plaintext is only for loopback and unix sockets unless the operator says otherwise
(``serve --insecure``); ``--tls-cert/--tls-key`` turn on TLS and ``--client-ca`` additionally
requires every client to present a certificate signed by that CA (mTLS).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import grpc

from model.errors import InvalidInput


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InvalidInput("", (flag,), f"cannot read {path}: {err.strerror or err}") from None


def server_credentials(*, cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    chain = _read(cert, "--tls-cert")
    private = _read(key, "--tls-key")
    ca = _read(client_ca, "--client-ca") if client_ca else None
    return grpc.ssl_server_credentials([(private, chain)], root_certificates=ca, require_client_auth=ca is not None)


def channel_credentials(*, ca: str | None = None, cert: str | None = None, key: str | None = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(ca, "--tls-ca") if ca else None,
        private_key=_read(key, "--tls-key") if key else None,
        certificate_chain=_read(cert, "--tls-cert") if cert else None,
    )


def is_loopback(host: str) -> bool:
    """True for loopback hosts ("localhost", 127.0.0.0/8, ::1); unix sockets count as local."""
    if host.startswith("unix:"):
        return True
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
