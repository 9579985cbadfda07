"""The federation's TLS certificates: a CA, server certificates, and the checks on them.

TLS here protects the transport and proves the server to clients (every client verifies the
server against the federation CA). Who a client is, on the bus, is proved by its NATS
credential (see `cairn.trust.credentials`), not by a client certificate, so a worker or a
site provisioned the distributed way needs no certificate of its own.

The one client certificate is the HTTP API's alternative to a bearer token (mutual TLS,
`cairn.httpapi.clientcert`): `cairn provision` issues one to each admin and reader kit
(`client.pem`, `client.key`), signed by the CA and carrying the identity's own credential
JWT (`IDENTITY_OID`), so the API maps the certificate to exactly the identity a token from
that credential would prove, and checks it back to the root as a token's.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVER_DAYS = 825
CLIENT_DAYS = 825
IDENTITY_OID = x509.ObjectIdentifier("2.25.200872313919371402655116296846419725337")
"""The client certificate's extension holding its identity's credential JWT (a UUID OID:
Cairn's own, registered nowhere)."""


def _name(common_name: str, org: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def new_ca(federation: str, *, days: int = CA_DAYS) -> tuple[bytes, bytes]:
    """A self-signed CA for `federation`: (certificate PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(f"Cairn {federation} CA", federation)
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def new_server_cert(ca_cert_pem: bytes, ca_key_pem: bytes, hosts: list[str], *,
                    federation: str, days: int = SERVER_DAYS,
                    client_auth: bool = False) -> tuple[bytes, bytes]:
    """A server certificate signed by the CA for DNS names and IPs `hosts`: (cert, key).
    `client_auth`: also a client's (a cluster route, where each server dials the others)."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(hosts[0], federation))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH,
                 *([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def write_route_cert(server_dir: Path, ca_dir: Path, hosts: list[str], *,
                     federation: str) -> None:
    """`server_dir/route.pem` and `route.key`, unless there: the certificate the servers of
    a cluster show each other on their routes (each dials the others: server and client
    use), from the CA in `ca_dir`."""
    if (server_dir / "route.pem").exists() and (server_dir / "route.key").exists():
        return
    cert, key = new_server_cert((ca_dir / "ca.pem").read_bytes(),
                                (ca_dir / "ca.key").read_bytes(), hosts,
                                federation=federation, client_auth=True)
    write_private(server_dir / "route.key", key)
    (server_dir / "route.pem").write_bytes(cert)


def new_client_cert(ca_cert_pem: bytes, ca_key_pem: bytes, name: str, credential_jwt: str,
                    *, federation: str, days: int = CLIENT_DAYS) -> tuple[bytes, bytes]:
    """A client certificate for identity `name` signed by the CA, carrying its credential
    JWT (`IDENTITY_OID`): (cert, key). It is for the HTTP API's mutual TLS only."""
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name, federation))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.UnrecognizedExtension(IDENTITY_OID, credential_jwt.encode()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


CLIENT_CERT = "client.pem"
CLIENT_KEY = "client.key"


def write_client_cert(ca_dir: Path, kit: Path, name: str, jwt: str, *,
                      federation: str) -> Path | None:
    """`client.pem` and `client.key` in `kit`: identity `name`'s certificate for the HTTP
    API's mutual TLS, signed by the CA in `ca_dir` and carrying its credential `jwt`. None
    where the CA's key is not there (a folder without it issues no certificates)."""
    if not (ca_dir / "ca.key").is_file():
        return None
    cert, key = new_client_cert((ca_dir / "ca.pem").read_bytes(),
                                (ca_dir / "ca.key").read_bytes(), name, jwt,
                                federation=federation)
    write_private(kit / CLIENT_KEY, key)
    (kit / CLIENT_CERT).write_bytes(cert)
    return kit / CLIENT_CERT


def write_private(path: Path, data: bytes | str) -> None:
    """Write a secret readable by its owner only (created so, never widened after)."""
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(raw)
