"""The HTTP API's mutual TLS (`cairn.httpapi.clientcert`): a kit's client certificate maps
to exactly its credential's identity; anything else, and a revoked identity, is refused with
one message naming what failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.errors import PermissionDenied, Unavailable
from cairn.httpapi.clientcert import Revocations, client_cert_of, identity_of_cert
from cairn.trust import pki
from cairn.trust.credentials import Identity, Kind, issue
from cairn.trust.nkeyjwt import KeyKind, new_seed, public_key

ALICE = Identity(kind=Kind.ADMIN, name="alice@org-a", org="org-a", admin_role="lead")


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A CA folder and a root seed, as `cairn provision` makes them."""
    folder = tmp_path_factory.mktemp("ca")
    cert, key = pki.new_ca("unit")
    (folder / "ca.pem").write_bytes(cert)
    (folder / "ca.key").write_bytes(key)
    return folder, new_seed(KeyKind.OPERATOR)


def _cert(ca: tuple[Path, str], tmp: Path, identity: Identity, *, name: str | None = None,
          root: str | None = None) -> str:
    folder, root_seed = ca
    jwt = issue(identity, public_key(new_seed(KeyKind.USER)), root or root_seed)
    made = pki.write_client_cert(folder, tmp, name or identity.name, jwt, federation="unit")
    assert made is not None
    return made.read_text()


def test_a_kits_certificate_is_its_credentials_identity(ca: tuple[Path, str],
                                                        tmp_path: Path) -> None:
    verified = identity_of_cert(_cert(ca, tmp_path, ALICE), frozenset({public_key(ca[1])}))
    assert verified.identity == ALICE


@pytest.mark.parametrize(("change", "message"), [
    ("other-root", "the client certificate's credential is not valid"),
    ("other-name", "the client certificate is for ['bob@org-b'], its credential for "
                   "alice@org-a"),
])
def test_a_certificate_that_does_not_check_out_is_refused(ca: tuple[Path, str],
                                                          tmp_path: Path, change: str,
                                                          message: str) -> None:
    roots = frozenset({public_key(ca[1])})
    pem = _cert(ca, tmp_path, ALICE, name="bob@org-b" if change == "other-name" else None,
                root=new_seed(KeyKind.OPERATOR) if change == "other-root" else None)
    with pytest.raises(PermissionDenied) as refused:
        identity_of_cert(pem, roots)
    assert refused.value.message.startswith(message) and refused.value.field == \
        "client-certificate"


def test_a_certificate_without_an_identity_is_refused(ca: tuple[Path, str]) -> None:
    folder, _ = ca
    server, _key = pki.new_server_cert((folder / "ca.pem").read_bytes(),
                                       (folder / "ca.key").read_bytes(), ["localhost"],
                                       federation="unit")
    with pytest.raises(PermissionDenied, match="names no Cairn identity"):
        identity_of_cert(server.decode(), frozenset({public_key(ca[1])}))


def test_the_scope_hands_over_only_a_verified_certificate() -> None:
    assert client_cert_of({"type": "http"}) is None
    assert client_cert_of({"extensions": {"tls": {"client_cert_chain": []}}}) is None
    assert client_cert_of({"extensions": {"tls": {"client_cert_chain": ["PEM"]}}}) == "PEM"


def test_revocation_is_read_again_when_it_changes_and_refuses_when_unreadable(
        ca: tuple[Path, str], tmp_path: Path) -> None:
    verified = identity_of_cert(_cert(ca, tmp_path, ALICE), frozenset({public_key(ca[1])}))
    path = tmp_path / "revoked.json"
    path.write_text('{"names": [], "jtis": []}\n')
    revocations = Revocations(path)
    revocations.check(verified, "token")
    path.write_text(json.dumps({"names": [ALICE.name], "jtis": []}) + "\n")
    with pytest.raises(PermissionDenied, match="alice@org-a has been revoked"):
        revocations.check(verified, "token")
    path.write_text(json.dumps({"names": [], "jtis": [verified.jti]}))
    with pytest.raises(PermissionDenied, match="the credential has been revoked"):
        revocations.check(verified, "token")
    path.write_text("not json")
    with pytest.raises(Unavailable, match="refusing every caller") as refused:
        revocations.check(verified, "token")
    assert str(path) in refused.value.message
    path.unlink()
    with pytest.raises(Unavailable, match="No such file"):
        revocations.check(verified, "token")
    Revocations(None).check(verified, "token")  # not given: nobody is refused here
