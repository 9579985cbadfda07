"""The HTTP API's bearer tokens (minted from the caller's own credential, short-lived) and
its scope (the caller's own broker rights, derived from the subject table)."""

from __future__ import annotations

import time

import pytest

from cairn.errors import NotFound, PermissionDenied
from cairn.trust import apitoken
from cairn.trust.credentials import Identity, Kind, issue
from cairn.trust.nkeyjwt import KeyKind, new_seed, public_key
from cairn.trust.permissions import Membership

pytest.importorskip("litestar", reason="the HTTP API is not installed (make setup)")

from cairn.httpapi.scope import caller_of, matches  # noqa: E402

ROOT = new_seed(KeyKind.OPERATOR)
ROOTS = frozenset({public_key(ROOT)})
MEMBERSHIP = {"alpha": Membership(sites=frozenset({"hub", "site-a"}),
                                  admins=frozenset({"alice@org-a"})),
              "beta": Membership(sites=frozenset({"hub", "site-b"}),
                                 admins=frozenset({"bob@org-b"}))}


def _credential(identity: Identity, root: str = ROOT) -> tuple[str, str]:
    seed = new_seed(KeyKind.USER)
    return issue(identity, public_key(seed), root), seed


ALICE = Identity(kind=Kind.ADMIN, name="alice@org-a", org="org-a", admin_role="lead")


def test_a_token_says_who_minted_it_and_nothing_else_verifies() -> None:
    jwt, seed = _credential(ALICE)
    token = apitoken.mint(jwt, seed, lifetime_s=60)
    assert apitoken.check(token, ROOTS).identity == ALICE
    prefix, _claims, signature = token.split(".")
    other_jwt, other_seed = _credential(Identity(kind=Kind.ADMIN, name="mallory@org-m"))
    forged = apitoken.mint(other_jwt, other_seed).split(".")[1]
    for bad, why in (
            (f"{prefix}.{forged}.{signature}", "signature"),  # someone else's credential
            (token[:-2] + ("AA" if not token.endswith("AA") else "BB"), "signature"),
            ("Bearer x", "not a Cairn API token"),
            (f"{prefix}.!!!.{signature}", "malformed"),
            ("x" * (apitoken.MAX_TOKEN_BYTES + 1), "at most")):
        with pytest.raises(PermissionDenied, match=why):
            apitoken.check(bad, ROOTS)


def test_a_token_of_another_root_expired_or_too_long_lived_is_refused() -> None:
    jwt, seed = _credential(ALICE, root=new_seed(KeyKind.OPERATOR))
    with pytest.raises(PermissionDenied, match="credential is not valid"):
        apitoken.check(apitoken.mint(jwt, seed), ROOTS)
    jwt, seed = _credential(ALICE)
    old = apitoken.mint(jwt, seed, lifetime_s=60, now=time.time() - 120)
    with pytest.raises(PermissionDenied, match="expired"):
        apitoken.check(old, ROOTS)
    future = apitoken.mint(jwt, seed, lifetime_s=60, now=time.time() + 600)
    with pytest.raises(PermissionDenied, match="at most"):
        apitoken.check(future, ROOTS)
    with pytest.raises(PermissionDenied, match="1 to"):
        apitoken.mint(jwt, seed, lifetime_s=apitoken.MAX_LIFETIME_S + 1)


def test_a_caller_reads_the_studies_the_broker_lets_it_read() -> None:
    alice = caller_of(ALICE, public_key(new_seed(KeyKind.USER)), MEMBERSHIP)
    assert alice.studies(["alpha", "beta"]) == ["alpha"]
    with pytest.raises(NotFound):
        alice.require_study("beta")
    admin = caller_of(Identity(kind=Kind.ADMIN, name="root@coord",
                               admin_role="project_admin"), "U", MEMBERSHIP)
    assert admin.studies(["alpha", "beta"]) == ["alpha", "beta"]
    reader = caller_of(Identity(kind=Kind.READER, name="r", study="beta"), "U", MEMBERSHIP)
    assert reader.studies(["alpha", "beta"]) == ["beta"]
    assert not reader.may_read_site("site-b")  # a reader reads its study, not FEDERATION
    worker = caller_of(Identity(kind=Kind.WORKER, name="w", site="site-a", study="alpha",
                                job="j-x", role="client"), "U", MEMBERSHIP)
    assert worker.studies(["alpha", "beta"]) == []
    # Membership changes what a caller sees at once, as it changes the broker's rights.
    moved = {**MEMBERSHIP, "beta": Membership(sites=frozenset({"hub"}),
                                              admins=frozenset({"alice@org-a"}))}
    assert caller_of(ALICE, "U", moved).studies(["alpha", "beta"]) == ["alpha", "beta"]


@pytest.mark.parametrize(("pattern", "subject", "expected"), [
    ("cairn.study.alpha.>", "cairn.study.alpha.job.j.submitted", True),
    ("cairn.study.alpha.>", "cairn.study.alpha", False),
    ("cairn.study.*.job.*.submitted", "cairn.study.beta.job.j.submitted", True),
    ("cairn.study.alpha.*", "cairn.study.alpha.job.j", False),
    ("cairn.study.alpha.>", "cairn.study.alphabet.job.j", False),
])
def test_subjects_match_as_the_server_matches_them(pattern: str, subject: str,
                                                   expected: bool) -> None:
    assert matches(pattern, subject) is expected
