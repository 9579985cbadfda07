"""Mutual TLS on the HTTP API (`cairn.httpapi.clientcert`): a kit's client certificate is
its Cairn identity with exactly its rights, a certificate of another CA is refused in the
handshake, and a revoked identity is refused by certificate and by token alike."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from cairn.trust import pki
from cairn.trust.nkeyjwt import read_creds
from cairn.trust.provision import admin_kit, revoke
from tests.fixtures.api import LEADS, ApiFederation

ALICE = LEADS["alpha"]


def _with_cert(api_fed: ApiFederation, cert: Path, key: Path) -> httpx.Client:
    context = ssl.create_default_context(cafile=str(api_fed.ca))
    context.load_cert_chain(str(cert), str(key))
    return httpx.Client(base_url=api_fed.url, verify=context, timeout=30.0)


def test_a_kits_client_certificate_is_its_identity_with_its_rights(
        api_federation: ApiFederation) -> None:
    assert api_federation.fed.trust is not None
    kit = api_federation.fed.trust.kit(ALICE)
    with _with_cert(api_federation, kit / "client.pem", kit / "client.key") as alice:
        who = alice.get("/v1/whoami")
        assert who.status_code == 200, who.text
        assert who.json()["name"] == ALICE and who.json()["studies"] == ["alpha"]
        assert alice.get("/v1/studies/alpha/jobs").json()["total"] >= 1
        assert alice.get("/v1/studies/beta").status_code == 404  # as with her token
        # A token on the same connection wins: the certificate is the fallback.
        bob = alice.get("/v1/whoami",
                        headers={"Authorization": f"Bearer {api_federation.token('bob@org-b')}"})
        assert bob.json()["name"] == "bob@org-b"


def test_a_certificate_of_another_ca_is_refused_in_the_handshake(
        api_federation: ApiFederation, tmp_path: Path) -> None:
    assert api_federation.fed.trust is not None
    jwt, _ = read_creds(api_federation.creds(ALICE).read_text())
    ca_cert, ca_key = pki.new_ca("impostor")
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "ca.pem").write_bytes(ca_cert)
    (tmp_path / "ca" / "ca.key").write_bytes(ca_key)
    # Alice's very credential, in a certificate the federation's CA never signed.
    made = pki.write_client_cert(tmp_path / "ca", tmp_path, ALICE, jwt, federation="local")
    assert made is not None
    with _with_cert(api_federation, made, tmp_path / "client.key") as impostor, \
            pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
        impostor.get("/v1/whoami")


def test_a_revoked_identity_is_refused_by_certificate_and_by_token(
        api_federation: ApiFederation) -> None:
    trust = api_federation.fed.trust
    assert trust is not None
    name = "carol@org-a"  # her own: revoking her touches no other test's caller
    kit = admin_kit(trust.dir, name, org="org-a", url=api_federation.fed.nats.url
                    if api_federation.fed.nats else "", federation="local")
    token = api_federation.token(name)
    with _with_cert(api_federation, kit / "client.pem", kit / "client.key") as carol:
        assert carol.get("/v1/whoami").json()["name"] == name
        assert carol.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}
                         ).status_code == 200
        revoke(trust.dir, name)
        by_cert = carol.get("/v1/whoami")
        assert by_cert.status_code == 401, by_cert.text
        assert by_cert.json()["message"] == f"{name} has been revoked"
        assert by_cert.json()["field"] == "client-certificate"
        by_token = carol.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        assert by_token.status_code == 401 and "revoked" in by_token.json()["message"]
