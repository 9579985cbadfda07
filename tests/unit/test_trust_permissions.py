"""What the broker is told each identity may do (the subject table, scoped)."""

from __future__ import annotations

from cairn.trust.credentials import Identity, Kind
from cairn.trust.permissions import Membership, permissions

MEMBERS = {"s1": Membership(sites=frozenset({"site-a"}), admins=frozenset({"alice@org-a"})),
           "s2": Membership(sites=frozenset({"site-b"}), admins=frozenset({"bob@org-b"}))}
KEY = "UAAAA"


def _matches(pattern: str, subject: str) -> bool:
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def _may(allow: tuple[str, ...], subject: str) -> bool:
    return any(_matches(p, subject) for p in allow)


def test_a_site_writes_only_its_own_token_in_its_own_studies() -> None:
    site = Identity(kind=Kind.SITE, name="site-a", site="site-a")
    perms = permissions(site, KEY, MEMBERS)
    assert _may(perms.pub_allow, "cairn.study.s1.job.j-1.site.site-a.accepted")
    assert not _may(perms.pub_allow, "cairn.study.s1.job.j-1.site.site-b.accepted")
    assert not _may(perms.pub_allow, "cairn.study.s2.job.j-1.site.site-a.accepted")
    assert not _may(perms.pub_allow, "cairn.study.s1.job.j-1.completed")  # coordinator's
    assert not _may(perms.pub_allow, "cairn.site.site-b.launch.requested")
    assert _may(perms.pub_allow, "cairn.site.site-a.launch.requested")
    assert not _may(perms.sub_allow, "cairn.>")
    assert not _may(perms.pub_allow, "$JS.API.CONSUMER.CREATE.STUDY_s2")
    assert _may(perms.pub_allow, "$JS.API.CONSUMER.CREATE.STUDY_s1")
    assert not any("STREAM.CREATE" in p or "STREAM.UPDATE" in p for p in perms.pub_allow)
    assert "cairn.study.s2.admin.>" in perms.sub_deny


def test_membership_changes_the_permissions() -> None:
    site = Identity(kind=Kind.SITE, name="site-a", site="site-a")
    joined = {**MEMBERS, "s2": Membership(sites=frozenset({"site-a", "site-b"}))}
    assert permissions(site, KEY, joined) != permissions(site, KEY, MEMBERS)
    assert _may(permissions(site, KEY, joined).pub_allow,
                "cairn.study.s2.job.j-1.site.site-a.exited")


def test_an_admin_requests_only_in_its_studies() -> None:
    alice = Identity(kind=Kind.ADMIN, name="alice@org-a", admin_role="lead")
    perms = permissions(alice, KEY, MEMBERS)
    assert _may(perms.pub_allow, "cairn.api.study.s1.submit")
    assert not _may(perms.pub_allow, "cairn.api.study.s2.submit")
    assert _may(perms.pub_allow, "cairn.api.fed.study-list")
    assert not _may(perms.pub_allow, "cairn.study.s1.job.j-1.completed")
    assert perms.sub_allow == (f"_INBOX.{KEY}.>",)
    boss = Identity(kind=Kind.ADMIN, name="root@coord", admin_role="project_admin")
    assert _may(permissions(boss, KEY, MEMBERS).pub_allow, "cairn.api.study.s2.cancel")


def test_a_worker_is_confined_to_its_job() -> None:
    worker = Identity(kind=Kind.WORKER, name="j-1/site-a/client/0/0", site="site-a",
                      study="s1", job="j-1", role="client")
    perms = permissions(worker, KEY, MEMBERS)
    assert _may(perms.pub_allow, "cairn.study.s1.job.j-1.worker.site-a.client.progress")
    assert not _may(perms.pub_allow, "cairn.study.s1.job.j-1.completed")
    assert not _may(perms.pub_allow, "cairn.study.s1.job.j-1.site.site-a.exited")
    assert _may(perms.pub_allow, "cairn.data.s1.j-1.server.0")
    assert not _may(perms.pub_allow, "cairn.data.s1.j-2.server.0")
    assert _may(perms.sub_allow, "cairn.data.s1.j-1.client.0")
    assert not _may(perms.sub_allow, "cairn.data.s1.j-2.client.0")
    assert not _may(perms.pub_allow, "$JS.API.CONSUMER.CREATE.DATA_s1")
    outside = Identity(kind=Kind.WORKER, name="w", site="site-b", study="s1", job="j-1",
                       role="client")
    assert permissions(outside, KEY, MEMBERS).pub_allow == ()
