"""Throwaway certificates for TLS tests: a CA, a server certificate for localhost/127.0.0.1,
and client certificates (one from the CA, one from an unrelated CA)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path
    other_cert: Path
    """A second client of the CA, with a common name of its own."""
    other_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, issuer_key: ec.EllipticCurvePrivateKey, *,
          ca: bool = False, server: bool = False, client: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate | None = None, key: ec.EllipticCurvePrivateKey | None = None) -> Path:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


def make_pki(directory: Path) -> Pki:
    ca_key, rogue_ca_key = _key(), _key()
    ca = _cert("dra-solver test CA", ca_key, "dra-solver test CA", ca_key, ca=True)
    server_key, client_key, rogue_key, other_key = _key(), _key(), _key(), _key()
    return Pki(
        ca=_write(directory / "ca.pem", ca),
        server_cert=_write(directory / "server.pem", _cert("localhost", server_key, "dra-solver test CA", ca_key, server=True)),
        server_key=_write(directory / "server-key.pem", key=server_key),
        client_cert=_write(directory / "client.pem", _cert("scheduler", client_key, "dra-solver test CA", ca_key, client=True)),
        client_key=_write(directory / "client-key.pem", key=client_key),
        rogue_cert=_write(directory / "rogue.pem", _cert("rogue", rogue_key, "rogue CA", rogue_ca_key, client=True)),
        rogue_key=_write(directory / "rogue-key.pem", key=rogue_key),
        other_cert=_write(directory / "other.pem", _cert("batch-scheduler", other_key, "dra-solver test CA", ca_key, client=True)),
        other_key=_write(directory / "other-key.pem", key=other_key),
    )
