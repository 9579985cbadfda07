"""Mutual TLS: a caller proves its Cairn identity with its client certificate, not a token.

`cairn provision` issues each admin and reader kit a certificate (`client.pem`) signed by the
federation CA and carrying the identity's own credential JWT (`cairn.trust.pki.IDENTITY_OID`).
With `-O client_ca=<ca.pem>` the API asks every TLS client for a certificate (optional, so a
bearer token still works): the TLS handshake refuses one the CA did not sign, and the
credential inside is checked back to the federation's roots exactly as a token's is, so the
caller is that identity with exactly its rights. Revocation (`-O revoked=<revoked.json>`, the
authority's file) refuses a revoked identity by either way in.

uvicorn hands an application no peer certificate, so the HTTP protocol it runs is this
module's subclass, which puts the verified certificate into each request's scope as the ASGI
TLS extension does (`scope["extensions"]["tls"]["client_cert_chain"]`, PEM).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from cairn.errors import CairnError, PermissionDenied, Unavailable
from cairn.trust.credentials import Verified, verify_credential
from cairn.trust.nkeyjwt import CredentialError

FIELD = "client-certificate"
Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Any, Any], Awaitable[None]]


def protocol_with_peer_cert(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol `base`, handing each request the connection's verified client
    certificate (PEM) in `scope["extensions"]["tls"]["client_cert_chain"]`."""

    class PeerCertProtocol(base):  # type: ignore[valid-type,misc]
        app: Asgi  # the base's: the application it calls for each request

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                self.app = _with_cert(self.app, ssl.DER_cert_to_PEM_cert(der))

    return PeerCertProtocol


def _with_cert(app: Asgi, pem: str) -> Asgi:
    async def with_cert(scope: Scope, receive: Any, send: Any) -> None:
        extensions = dict(scope.get("extensions") or {})
        extensions["tls"] = {**extensions.get("tls", {}), "client_cert_chain": [pem]}
        scope["extensions"] = extensions
        await app(scope, receive, send)

    return with_cert


def client_cert_of(scope: Mapping[str, Any]) -> str | None:
    """The verified client certificate of a request's connection (PEM), if it sent one."""
    chain = ((scope.get("extensions") or {}).get("tls") or {}).get("client_cert_chain")
    return chain[0] if isinstance(chain, list) and chain and isinstance(chain[0], str) \
        else None


def identity_of_cert(pem: str, roots: frozenset[str]) -> Verified:
    """Who a client certificate (already verified against the CA by the TLS handshake) says
    its holder is: its credential, checked back to `roots` as a token's is.

    Raises:
        PermissionDenied: no Cairn identity in it, or a credential that does not check out,
            or a certificate whose name is not its credential's.
    """
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    from cairn.trust.pki import IDENTITY_OID

    try:
        cert = x509.load_pem_x509_certificate(pem.encode())
        ext = cert.extensions.get_extension_for_oid(IDENTITY_OID).value
    except x509.ExtensionNotFound:
        raise PermissionDenied("the client certificate names no Cairn identity (use the "
                               "kit's client.pem from `cairn provision`)", field=FIELD) from None
    except ValueError as exc:
        raise PermissionDenied(f"malformed client certificate: {exc}", field=FIELD) from None
    raw = ext.value if isinstance(ext, x509.UnrecognizedExtension) else b""
    try:
        verified = verify_credential(raw.decode("ascii"), roots)
    except (CredentialError, UnicodeDecodeError) as exc:
        raise PermissionDenied(f"the client certificate's credential is not valid: {exc}",
                               field=FIELD) from None
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [verified.identity.name]:
        raise PermissionDenied(f"the client certificate is for {names}, its credential for "
                               f"{verified.identity.name}", field=FIELD)
    return verified


class Revocations:
    """The authority's revocation file (`revoked.json`), read again whenever it changes: a
    revoked identity (by name, its site's name, or its credential's id) is refused."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._names: frozenset[str] = frozenset()
        self._jtis: frozenset[str] = frozenset()

    def _load(self) -> None:
        assert self.path is not None
        from cairn.trust.kitfiles import read_revoked

        try:
            stat = self.path.stat()
        except OSError as exc:
            raise Unavailable(f"cannot tell who is revoked ({self.path}: "
                              f"{exc.strerror or exc}); refusing every caller",
                              field="revoked") from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            data = read_revoked(self.path)
        except CairnError as exc:
            raise Unavailable(f"cannot tell who is revoked ({self.path}: {exc.message}); "
                              "refusing every caller", field="revoked") from None
        self._names, self._jtis = frozenset(data["names"]), frozenset(data["jtis"])
        self._stamp = stamp

    def check(self, verified: Verified, field: str) -> None:
        """Raises PermissionDenied when `verified` is revoked, Unavailable when the file
        cannot be read (refusing is the safe answer: 503, the operator's to fix)."""
        if self.path is None:
            return
        self._load()
        identity = verified.identity
        if {verified.jti, verified.site_jti} & self._jtis - {""}:
            raise PermissionDenied("the credential has been revoked", field=field)
        if identity.name in self._names or (identity.site and identity.site in self._names):
            raise PermissionDenied(f"{identity.name} has been revoked", field=field)
