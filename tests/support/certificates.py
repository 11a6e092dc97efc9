"""Throwaway CAs and certificates for 127.0.0.1/localhost, for TLS and mTLS tests."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LOOPBACK = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


@dataclass(frozen=True)
class Certificates:
    ca_file: Path
    server_key_pem: bytes
    server_chain_pem: bytes


@dataclass(frozen=True)
class Pki:
    """Files: a CA, a server certificate it signed, a client certificate it signed, and a
    client certificate from another CA (which a server trusting only the first refuses)."""

    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    client_cert_file: Path
    client_key_file: Path
    stranger_cert_file: Path
    stranger_key_file: Path


def make_certificates(directory: Path) -> Certificates:
    ca_key, ca = _authority("spanscore test CA")
    key, server = _issue(ca_key, ca, "localhost", LOOPBACK)
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(_pem(ca))
    return Certificates(ca_file, _key_pem(key), _pem(server))


def make_pki(directory: Path) -> Pki:
    ca_key, ca = _authority("spanscore test CA")
    other_key, other = _authority("some other CA")
    files = {}
    for name, (key, certificate) in {
        "server": _issue(ca_key, ca, "localhost", LOOPBACK),
        "client": _issue(ca_key, ca, "agent"),
        "stranger": _issue(other_key, other, "agent"),
    }.items():
        files[f"{name}_cert_file"] = directory / f"{name}.pem"
        files[f"{name}_cert_file"].write_bytes(_pem(certificate))
        files[f"{name}_key_file"] = directory / f"{name}-key.pem"
        files[f"{name}_key_file"].write_bytes(_key_pem(key))
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(_pem(ca))
    return Pki(ca_file=ca_file, **files)


def _authority(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        _valid_now(x509.CertificateBuilder())
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, certificate


def _issue(ca_key, ca: x509.Certificate, common_name: str, names: x509.SubjectAlternativeName | None = None):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        _valid_now(x509.CertificateBuilder()).subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
    )
    if names is not None:
        builder = builder.add_extension(names, critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _valid_now(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
