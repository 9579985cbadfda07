"""Credentials: root -> site -> worker chains, and every way one can be wrong."""

from __future__ import annotations

import time

import pytest

from cairn.errors import InvalidName
from cairn.trust.credentials import Identity, Kind, issue, mint_worker, verify_credential
from cairn.trust.nkeyjwt import (
    CredentialError,
    KeyKind,
    creds_file_text,
    decode_jwt,
    encode_jwt,
    new_seed,
    public_key,
    read_creds,
)


def _root() -> tuple[str, frozenset[str]]:
    seed = new_seed(KeyKind.OPERATOR)
    return seed, frozenset({public_key(seed)})


def _site(root: str, site: str = "site-a") -> tuple[str, str]:
    signing = new_seed(KeyKind.ACCOUNT)
    identity = Identity(kind=Kind.SITE, name=site, site=site, org="org-a",
                        signing_key=public_key(signing))
    return issue(identity, public_key(new_seed(KeyKind.USER)), root), signing


def _worker(site_jwt: str, signing: str, *, site: str = "site-a",
            expires: int | None = None) -> str:
    jwt, _ = mint_worker(site_jwt=site_jwt, signing_seed=signing, study="s1", job="j-1",
                         site=site, role="client", attempt=0, launch_id="j-1/site-a/client/0/0",
                         expires=expires or int(time.time()) + 60)
    return jwt


def test_a_site_credential_verifies_against_its_root_only() -> None:
    root, roots = _root()
    site_jwt, _ = _site(root)
    assert verify_credential(site_jwt, roots).identity.site == "site-a"
    _, other_roots = _root()
    with pytest.raises(CredentialError, match="does not trust"):
        verify_credential(site_jwt, other_roots)


def test_a_worker_credential_chains_through_its_site() -> None:
    root, roots = _root()
    site_jwt, signing = _site(root)
    verified = verify_credential(_worker(site_jwt, signing), roots)
    assert verified.identity.kind is Kind.WORKER
    assert verified.identity.name == "j-1/site-a/client/0/0"
    assert verified.expires > time.time()


def test_a_site_cannot_mint_workers_of_another_site() -> None:
    root, roots = _root()
    site_jwt, signing = _site(root)
    with pytest.raises(CredentialError, match="own site"):
        verify_credential(_worker(site_jwt, signing, site="site-b"), roots)


def test_a_worker_signed_by_a_key_the_site_was_not_given_is_refused() -> None:
    root, roots = _root()
    site_jwt, _ = _site(root)
    forged = _worker(site_jwt, new_seed(KeyKind.ACCOUNT))
    with pytest.raises(CredentialError, match="does not trust"):
        verify_credential(forged, roots)


def test_an_expired_worker_credential_is_refused() -> None:
    root, roots = _root()
    site_jwt, signing = _site(root)
    jwt = _worker(site_jwt, signing, expires=int(time.time()) + 5)
    with pytest.raises(CredentialError, match="expired"):
        verify_credential(jwt, roots, now=time.time() + 10)


def test_a_tampered_claim_breaks_the_signature() -> None:
    root, roots = _root()
    site_jwt, _ = _site(root)
    head, body, sig = site_jwt.split(".")
    import base64
    import json

    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["cairn"]["kind"] = "hub"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(CredentialError, match="signature"):
        verify_credential(f"{head}.{forged}.{sig}", roots)


def test_a_worker_needs_its_site_chain() -> None:
    root, roots = _root()
    bare = issue(Identity(kind=Kind.WORKER, name="w", site="site-a"),
                 public_key(new_seed(KeyKind.USER)), root)
    with pytest.raises(CredentialError, match="minted by its site"):
        verify_credential(bare, roots)


def test_bad_names_cannot_be_minted() -> None:
    root, _ = _root()
    site_jwt, signing = _site(root)
    with pytest.raises(InvalidName):
        mint_worker(site_jwt=site_jwt, signing_seed=signing, study="s1.>", job="j-1",
                    site="site-a", role="client", attempt=0, expires=1, launch_id="x")


def test_creds_file_round_trip_and_jwt_garbage() -> None:
    seed = new_seed(KeyKind.USER)
    jwt = encode_jwt({"sub": public_key(seed)}, new_seed(KeyKind.OPERATOR))
    assert read_creds(creds_file_text(jwt, seed)) == (jwt, seed)
    for garbage in ("", "a.b", "a.b.c", "x" * 50):
        with pytest.raises(CredentialError):
            decode_jwt(garbage)
    with pytest.raises(CredentialError):
        read_creds("nothing here")
