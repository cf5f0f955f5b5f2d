"""TLS for the gRPC endpoint: server credentials from PEM files, and the client side.

Plaintext is only for loopback and unix sockets unless the operator says otherwise
(``serve --insecure``); ``--tls-cert/--tls-key`` turn on TLS and ``--client-ca`` additionally
requires every client to present a certificate signed by that CA (mTLS).

The server re-reads the files when they change (checked at each new TLS handshake), so a
certificate renewed in its Secret (cert-manager, or ``kubectl create secret ... | apply``) is
served to new connections without a restart. A changed set that does not load (a key that does
not match the certificate, a half-written file) is logged and the previous one kept.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import cast

import grpc

from dra_solver.model import InvalidInput

log = logging.getLogger(__name__)


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise InvalidInput("", (flag,), f"cannot read {path}: {err.strerror or err}") from None


class CertificateFiles:
    """The server's PEM files, and a fetcher that reloads them once they change on disk."""

    def __init__(self, *, cert: str, key: str, client_ca: str | None = None) -> None:
        self.flags = {"--tls-cert": cert, "--tls-key": key}
        if client_ca:
            self.flags["--client-ca"] = client_ca
        self._stamp = self._stamps()
        self._rejected: tuple[tuple[int, int, int], ...] | None = None
        self.current = self.load()
        self.reloads = 0

    def _stamps(self) -> tuple[tuple[int, int, int], ...]:
        # stat follows the symlinks of a Secret volume, whose update swaps them atomically.
        out = []
        for flag, path in self.flags.items():
            try:
                st = os.stat(path)
            except OSError as err:
                raise InvalidInput("", (flag,), f"cannot read {path}: {err.strerror or err}") from None
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def load(self) -> grpc.ServerCertificateConfiguration:
        """Read and check the files: the key must match the certificate (as ``ssl`` checks it)."""
        chain, private = _key_pair(self.flags["--tls-cert"], self.flags["--tls-key"])
        ca = _certificates(self.flags["--client-ca"], "--client-ca") if "--client-ca" in self.flags else None
        return grpc.ssl_server_certificate_configuration([(private, chain)], root_certificates=ca)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's certificate_configuration_fetcher: a new configuration, or None to keep the old."""
        try:
            stamp = self._stamps()
        except InvalidInput:
            # A file missing for a moment (mid-swap): keep serving, look again next handshake.
            return None
        if stamp == self._stamp or stamp == self._rejected:
            return None
        try:
            self.current = self.load()
        except InvalidInput as err:
            log.error("TLS files changed but cannot be used, keeping the previous ones: %s", err)
            self._rejected = stamp
            return None
        self._stamp, self._rejected = stamp, None
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.flags["--tls-cert"])
        return self.current


def server_credentials(*, cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    files = CertificateFiles(cert=cert, key=key, client_ca=client_ca)
    # gRPC documents a fetcher result of None as "no change"; its type stubs leave None out.
    fetch = cast(Callable[[], grpc.ServerCertificateConfiguration], files.fetch)
    return grpc.dynamic_ssl_server_credentials(files.current, fetch, require_client_authentication=client_ca is not None)


_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.+?-----END CERTIFICATE-----", re.DOTALL)


def _certificates(path: str, flag: str) -> bytes:
    """The file's bytes, once they are known to hold PEM certificates OpenSSL reads (gRPC's
    C core would otherwise log, then fail every call as UNAVAILABLE)."""
    data = _read(path, flag)
    blocks = _PEM_CERTIFICATE.findall(data)
    if not blocks:
        raise InvalidInput("", (flag,), f"{path} is not a PEM certificate file (no -----BEGIN CERTIFICATE----- block)")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=b"\n".join(blocks).decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as err:
        raise InvalidInput("", (flag,), f"{path}: not a valid PEM certificate: {err}") from None
    return data


def _no_password() -> bytes:
    raise ValueError("the key is encrypted (gRPC needs an unencrypted PEM key)")


def client_files(*, ca: str | None = None, cert: str | None = None, key: str | None = None) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The client's PEM files (CA bundle, certificate chain, key), checked before any channel is
    made: a certificate without its key (or a key alone) is refused, as gRPC's C core aborts the
    process on the first and ignores the second; each file must be readable PEM, and the key
    must match the certificate."""
    if bool(cert) != bool(key):
        raise InvalidInput("", (), "--tls-cert and --tls-key go together")
    root = _certificates(ca, "--tls-ca") if ca else None
    if not cert or not key:
        return root, None, None
    chain, private = _key_pair(cert, key)
    return root, chain, private


def _key_pair(cert: str, key: str) -> tuple[bytes, bytes]:
    """A certificate chain and its key, server's or client's: PEM certificates, and a key that
    matches them and is not encrypted (OpenSSL would otherwise ask for its password on the
    terminal)."""
    chain = _certificates(cert, "--tls-cert")
    private = _read(key, "--tls-key")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=_no_password)
    except (ssl.SSLError, OSError, ValueError) as err:
        raise InvalidInput("", ("--tls-key",), f"does not match --tls-cert or is not a PEM key: {err}") from None
    return chain, private


def channel_credentials(*, ca: str | None = None, cert: str | None = None, key: str | None = None) -> grpc.ChannelCredentials:
    root, chain, private = client_files(ca=ca, cert=cert, key=key)
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=private, certificate_chain=chain)


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
