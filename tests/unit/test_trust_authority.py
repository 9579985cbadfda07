"""The authority's answer to one authorization request (what nats-server sends it)."""

from __future__ import annotations

import base64
import time

from cairn.trust.authority import Authorizer
from cairn.trust.credentials import Identity, Kind, issue, mint_worker
from cairn.trust.nkeyjwt import KeyKind, decode_jwt, encode_jwt, new_seed, public_key, sign
from cairn.trust.permissions import Membership

ROOT = new_seed(KeyKind.OPERATOR)
ISSUER = new_seed(KeyKind.ACCOUNT)
SERVER = new_seed(KeyKind.SERVER)
SIGNING = new_seed(KeyKind.ACCOUNT)
SITE_SEED = new_seed(KeyKind.USER)
SITE = issue(Identity(kind=Kind.SITE, name="site-a", site="site-a",
                      signing_key=public_key(SIGNING)), public_key(SITE_SEED), ROOT)


def _authorizer() -> Authorizer:
    return Authorizer(roots=frozenset({public_key(ROOT)}), issuer_seed=ISSUER,
                      membership={"s1": Membership(sites=frozenset({"site-a"}))})


def _request(token: str, seed: str, *, nonce: str = "n0nce", signed: str | None = None) -> str:
    sig = base64.b64encode(sign(seed, (signed or nonce).encode())).decode()
    claims = {"sub": public_key(ISSUER), "aud": "nats-authorization-request",
              "exp": int(time.time()) + 5,
              "nats": {"server_id": {"id": public_key(SERVER)}, "user_nkey": "UCONN",
                       "client_info": {"id": 7, "nonce": nonce},
                       "connect_opts": {"auth_token": token, "sig": sig},
                       "type": "authorization_request", "version": 2}}
    return encode_jwt(claims, SERVER)


def _answer(response: str) -> dict[str, object]:
    nats = decode_jwt(response)["nats"]
    assert isinstance(nats, dict)
    return nats


def test_a_site_is_admitted_with_its_permissions() -> None:
    decision = _authorizer().decide(_request(SITE, SITE_SEED))
    assert decision.connection is not None and decision.connection.client_id == 7
    user = decode_jwt(str(_answer(decision.response)["jwt"]), issuers=frozenset(
        {public_key(ISSUER)}))
    assert user["aud"] == "APP" and user["sub"] == "UCONN"
    assert "cairn.site.site-a.launch.requested" in user["nats"]["pub"]["allow"]
    # Bounded even though a site's credential never expires: it renews by reconnecting.
    assert time.time() < user["exp"] <= time.time() + _authorizer().session_s + 1


def test_refusals_name_their_reason() -> None:
    auth = _authorizer()
    assert "prove" in _answer(auth.decide(_request(SITE, new_seed(KeyKind.USER))).response
                              )["error"]
    assert "prove" in _answer(auth.decide(_request(SITE, SITE_SEED, signed="other")).response
                              )["error"]
    auth.revoked_names.add("site-a")
    assert "revoked" in _answer(auth.decide(_request(SITE, SITE_SEED)).response)["error"]
    assert _authorizer().decide(_request("", SITE_SEED)).connection is None
    forged_server = _request(SITE, SITE_SEED).replace("a", "b", 1)
    assert _authorizer().decide(forged_server).response == ""


def test_a_worker_of_an_ended_job_is_refused_and_a_live_one_expires() -> None:
    expires = int(time.time()) + 60
    jwt, seed = mint_worker(site_jwt=SITE, signing_seed=SIGNING, study="s1", job="j-1",
                            site="site-a", role="client", attempt=0,
                            launch_id="j-1/site-a/client/0/0", expires=expires)
    auth = _authorizer()
    decision = auth.decide(_request(jwt, seed))
    user = decode_jwt(str(_answer(decision.response)["jwt"]))
    # The connection's user JWT ends when the worker's credential does: the broker closes
    # a live worker's connection at that time, whatever else happens.
    assert user["exp"] == expires
    assert decision.connection is not None and auth.still_allowed(decision.connection)
    auth.ended_jobs.add(("s1", "j-1"))
    assert not auth.still_allowed(decision.connection)
    assert "ended" in _answer(auth.decide(_request(jwt, seed)).response)["error"]
