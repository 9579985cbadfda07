"""What the broker is told each identity may do: the subject table's rows, bound to the
identity (the real server's enforcement of the same is tests/integration/test_rights_matrix.py)."""

from __future__ import annotations

import pytest

from cairn.subjects.table import SUBJECTS, consumer_owner
from cairn.trust.credentials import Identity, Kind
from cairn.trust.permissions import Membership, Permissions, permissions
from tests.subject_match import may

MEMBERS = {"s1": Membership(sites=frozenset({"site-a"}), admins=frozenset({"alice@org-a"})),
           "s2": Membership(sites=frozenset({"site-b"}), admins=frozenset({"bob@org-b"}))}
KEY = "UAAAA"
SITE_A = Identity(kind=Kind.SITE, name="site-a", site="site-a")
ALICE = Identity(kind=Kind.ADMIN, name="alice@org-a", admin_role="lead")
WORKER = Identity(kind=Kind.WORKER, name="j-1/site-a/client/0/0", site="site-a", study="s1",
                  job="j-1", role="client")
HUB = Identity(kind=Kind.HUB, name="hub", site="hub")
READER = Identity(kind=Kind.READER, name="dash@org-a", study="s1")


def _pub(identity: Identity, subject: str) -> bool:
    return may(permissions(identity, KEY, MEMBERS).pub_allow, subject)


def _sub(identity: Identity, subject: str) -> bool:
    return may(permissions(identity, KEY, MEMBERS).sub_allow, subject)


def _own(identity: Identity, slot: int = 0) -> str:
    return f"{consumer_owner(identity.kind.value, identity.name, identity.site)}_{slot}"


def test_a_site_writes_only_its_own_token_in_its_own_studies() -> None:
    assert _pub(SITE_A, "cairn.study.s1.job.j-1.site.site-a.accepted")
    assert _pub(SITE_A, "cairn.study.s1.job.j-1.site.site-a.exited")
    assert not _pub(SITE_A, "cairn.study.s1.job.j-1.site.site-a.completed")  # not a site verb
    assert not _pub(SITE_A, "cairn.study.s1.job.j-1.site.site-b.accepted")
    assert not _pub(SITE_A, "cairn.study.s2.job.j-1.site.site-a.accepted")
    assert not _pub(SITE_A, "cairn.study.s1.job.j-1.completed")  # the coordinator's
    assert not _pub(SITE_A, "cairn.study.s1.admin.site-added")
    assert not _pub(SITE_A, "cairn.site.site-b.launch.requested")
    assert _pub(SITE_A, "cairn.site.site-a.launch.requested")
    assert not _sub(SITE_A, "cairn.>")
    assert not _sub(SITE_A, "cairn.study.*.admin.>")  # no other study's creation
    assert not _sub(SITE_A, "cairn.study.s2.admin.created")
    assert _sub(SITE_A, "cairn.study.s1.admin.created")
    perms = permissions(SITE_A, KEY, MEMBERS)
    assert not any("STREAM.CREATE" in p or "STREAM.UPDATE" in p or "STREAM.NAMES" in p
                   or "STREAM.LIST" in p for p in perms.pub_allow)


def test_consumers_belong_to_their_owner() -> None:
    mine = _own(SITE_A)
    assert _pub(SITE_A, f"$JS.API.CONSUMER.CREATE.STUDY_s1.{mine}")
    assert _pub(SITE_A, f"$JS.API.CONSUMER.CREATE.STUDY_s1.{mine}.cairn.study.s1.>")
    assert _pub(SITE_A, f"$JS.API.CONSUMER.MSG.NEXT.STUDY_s1.{mine}")
    assert _pub(SITE_A, "$JS.API.CONSUMER.CREATE.STUDY_s1.agent-site-a")
    assert _pub(SITE_A, "$JS.ACK.STUDY_s1.agent-site-a.1.2.3.4.5")
    for other in ("coordinator", "agent-site-b", _own(ALICE), "site-b_0"):
        for verb in ("CREATE", "MSG.NEXT", "DELETE", "INFO"):
            assert not _pub(SITE_A, f"$JS.API.CONSUMER.{verb}.STUDY_s1.{other}"), other
        assert not _pub(SITE_A, f"$JS.ACK.STUDY_s1.{other}.1.2.3.4.5")
    # The unnamed create's body may name any consumer, so it is nobody's but the hub's.
    assert not _pub(SITE_A, "$JS.API.CONSUMER.CREATE.STUDY_s1")
    assert not _pub(SITE_A, f"$JS.API.CONSUMER.CREATE.STUDY_s2.{mine}")
    assert _pub(HUB, "$JS.API.CONSUMER.CREATE.STUDY_s1")


def test_membership_changes_the_permissions() -> None:
    joined = {**MEMBERS, "s2": Membership(sites=frozenset({"site-a", "site-b"}))}
    assert permissions(SITE_A, KEY, joined) != permissions(SITE_A, KEY, MEMBERS)
    assert may(permissions(SITE_A, KEY, joined).pub_allow,
                "cairn.study.s2.job.j-1.site.site-a.exited")


def test_an_admin_requests_and_reads_only_in_its_studies() -> None:
    assert _pub(ALICE, "cairn.api.study.s1.submit")
    assert not _pub(ALICE, "cairn.api.study.s2.submit")
    assert _pub(ALICE, "cairn.api.fed.study-list")
    assert not _pub(ALICE, "cairn.study.s1.job.j-1.completed")
    assert _pub(ALICE, "cairn.api.site.site-a.logs")
    assert not _pub(ALICE, "cairn.api.site.site-b.logs")  # not a site of its studies
    assert _pub(ALICE, f"$JS.API.CONSUMER.CREATE.STUDY_s1.{_own(ALICE)}")
    assert not _pub(ALICE, f"$JS.API.CONSUMER.CREATE.STUDY_s2.{_own(ALICE)}")
    assert not _pub(ALICE, "$JS.API.CONSUMER.MSG.NEXT.STUDY_s1.coordinator")
    boss = Identity(kind=Kind.ADMIN, name="root@coord", admin_role="project_admin")
    assert _pub(boss, "cairn.api.study.s2.cancel")
    assert not _pub(boss, "cairn.study.s2.job.j-1.completed")


def test_a_worker_is_confined_to_its_job() -> None:
    mine = _own(WORKER)
    assert _pub(WORKER, "cairn.study.s1.job.j-1.worker.site-a.client.progress")
    assert not _pub(WORKER, "cairn.study.s1.job.j-1.worker.site-a.server.progress")
    assert not _pub(WORKER, "cairn.study.s1.job.j-2.worker.site-a.client.progress")
    assert not _pub(WORKER, "cairn.study.s1.job.j-1.site.site-a.exited")
    assert _pub(WORKER, "cairn.data.s1.j-1.server.0.update")
    assert not _pub(WORKER, "cairn.data.s1.j-2.server.0.update")
    assert _pub(WORKER, "cairn.files.s1.j-1." + "a" * 64 + ".m")
    assert not _pub(WORKER, "cairn.files.s1.j-2." + "a" * 64 + ".m")
    assert not _pub(WORKER, "$O.artifacts_s1.M.abc")  # the study's code bundles
    assert _pub(WORKER, f"$JS.API.CONSUMER.CREATE.DATA_s1.{mine}.cairn.data.s1.j-1.>")
    assert not _pub(WORKER, f"$JS.API.CONSUMER.CREATE.DATA_s1.{mine}.cairn.data.s1.j-2.>")
    assert not _pub(WORKER, f"$JS.API.CONSUMER.CREATE.DATA_s1.{mine}")  # unfiltered
    assert not _pub(WORKER, "$JS.API.CONSUMER.DELETE.STUDY_s1.coordinator")
    assert not _pub(WORKER, "$JS.API.CONSUMER.DELETE.STUDY_s1.agent-site-a")
    assert not _pub(WORKER, "$JS.API.CONSUMER.MSG.NEXT.DATA_s1.w~other_0")
    assert _sub(WORKER, "cairn.study.s1.job.j-1.completed")
    assert not _sub(WORKER, "cairn.study.s1.job.j-2.completed")
    gone = {"s1": Membership(sites=frozenset({"site-b"}))}
    assert permissions(WORKER, KEY, gone).pub_allow == ()


def test_the_hub_never_writes_as_a_site_or_a_worker() -> None:
    assert _pub(HUB, "cairn.study.s1.job.j-1.completed")
    assert _pub(HUB, "cairn.study.s1.admin.site-added")
    assert _pub(HUB, "cairn.site.hub.launch.requested")  # its own site's agent
    assert not _pub(HUB, "cairn.site.site-a.launch.requested")
    assert not _pub(HUB, "cairn.study.s1.job.j-1.worker.site-a.client.result")
    assert not _pub(HUB, "cairn.study.s1.job.j-1.site.site-a.exited")


# (A study's lead admin asks each of its study's sites for logs and snapshots by name: its
# rights grow with its own study's members, and only with those.)
@pytest.mark.parametrize("identity", [HUB, SITE_A, WORKER,
                                      Identity(kind=Kind.ADMIN, name="root@org-a",
                                               admin_role="project_admin"),
                                      Identity(kind=Kind.API, name="api")], ids=str)
def test_rights_do_not_grow_with_the_federation(identity: Identity) -> None:
    """A user JWT travels in the server's one auth answer (at most 1 MiB): rights that
    named each site would not fit 10,000 sites, and would change whenever one joins."""
    def members(sites: int) -> dict[str, Membership]:
        names = frozenset({"site-a", *(f"site-{i:05d}" for i in range(sites))})
        return {"s1": Membership(sites=names, admins=frozenset({"alice@org-a"}))}

    few, many = (permissions(identity, KEY, members(n)) for n in (2, 10_000))
    assert len(many.pub_allow) + len(many.sub_allow) <= len(few.pub_allow) + len(
        few.sub_allow), "no right per site"


def test_the_hub_reads_every_site_and_study_under_wildcards() -> None:
    perms = permissions(HUB, KEY, MEMBERS)
    # Also of a site or a study that joined after the hub connected.
    for subject in ("cairn.site.site-z.launch.requested", "cairn.study.s9.job.j-1.completed",
                    "cairn.site.site-z.snapshot", "cairn.deadletter.SITE_site-z"):
        assert may(perms.sub_allow, subject), subject
    assert not [s for s in perms.sub_allow if "site-a" in s or "s1" in s.split(".")]
    # Each right once: none that another already covers.
    assert "cairn.site.hub.snapshot" not in perms.sub_allow


def test_a_reader_reads_its_study_and_writes_nothing() -> None:
    perms: Permissions = permissions(READER, KEY, MEMBERS)
    events = [p for p in perms.pub_allow if not p.startswith("$JS.API.")]
    assert events == []
    mine = _own(READER)
    assert _pub(READER, f"$JS.API.CONSUMER.CREATE.STUDY_s1.{mine}")
    assert _pub(READER, "$JS.API.STREAM.INFO.STUDY_s1")
    assert not _pub(READER, f"$JS.API.CONSUMER.CREATE.DATA_s1.{mine}")
    assert not _pub(READER, f"$JS.API.CONSUMER.CREATE.STUDY_s2.{mine}")
    with_data = Identity(kind=Kind.READER, name="dash@org-a", study="s1", data=True)
    assert _pub(with_data, f"$JS.API.CONSUMER.CREATE.DATA_s1.{mine}")
    assert _pub(with_data, f"$JS.API.CONSUMER.CREATE.FILES_s1.{mine}")


@pytest.mark.parametrize("identity", [SITE_A, ALICE, WORKER, HUB, READER], ids=str)
def test_every_identity_reads_its_own_inbox_only(identity: Identity) -> None:
    assert _sub(identity, f"_INBOX.{KEY}.x")
    assert not _sub(identity, "_INBOX.USOMEONEELSE.x")


API = Identity(kind=Kind.API, name="api")


def test_the_api_reads_for_its_callers_and_writes_nothing_of_its_own() -> None:
    events = [row for row in SUBJECTS if row.kind == "event"]
    concrete = [row.pattern.replace("{study}", "s1").replace("{job}", "j-1")
                .replace("{site}", "site-a").replace("{role}", "client")
                .replace("{recipe}", "cpu").replace("{stream}", "STUDY_s1")
                .replace("{verb}", row.verbs[0] if row.verbs else "x").replace(">", "x")
                for row in events]
    assert concrete and not [s for s in concrete if _pub(API, s)]
    # The callers' own signed submit and cancel, passed on; no other request of its own.
    assert _pub(API, "cairn.api.study.s1.submit") and _pub(API, "cairn.api.study.s2.cancel")
    for asked in ("cairn.api.study.s1.membership", "cairn.api.study.s1.show",
                  "cairn.api.fed.studies", "cairn.api.validation.start",
                  "cairn.api.site.site-a.logs", "cairn.api.site.site-a.snapshot",
                  "cairn.health.coordinator.hub"):
        assert not _pub(API, asked), asked
    # Every study's events and the federation's facts: it answers any caller with those.
    for stream in ("STUDY_s1", "STUDY_s2", "FEDERATION", "EVIDENCE", "OBJ_evidence",
                   "OBJ_snapshots"):
        assert _pub(API, f"$JS.API.CONSUMER.CREATE.{stream}.{_own(API)}"), stream
    assert _sub(API, "cairn.study.s2.job.j-1.completed")
    # Not what no page shows: data planes, job files, code, launches, nonces, dead letters.
    for stream in ("DATA_s1", "FILES_s1", "OBJ_artifacts_s1", "SITE_site-a", "KV_nonces",
                   "KV_launches_site-a", "DEADLETTER", "KV_sites"):
        assert not _pub(API, f"$JS.API.CONSUMER.CREATE.{stream}.{_own(API)}"), stream
        if stream != "OBJ_artifacts_s1":  # which a writer of code bundles looks up
            assert not _pub(API, f"$JS.API.STREAM.INFO.{stream}"), stream
    assert not _sub(API, "cairn.data.s1.j-1.round") and not _sub(API, "cairn.site.a.heartbeat")
    # Its ping only: never another service's.
    assert _sub(API, "cairn.health.httpapi.hub") and not _sub(API, "cairn.health.agent.hub")
    assert not any("STREAM.CREATE" in p or "STREAM.DELETE" in p or "$KV." in p
                   for p in permissions(API, KEY, MEMBERS).pub_allow)
    # Its one store write: a code bundle, content-addressed, for a caller's signed submit.
    assert _pub(API, "$O.artifacts_s1.C.x") and not _pub(API, "$O.evidence.C.x")
    assert not _pub(API, "$O.snapshots.M.x") and not _pub(API, "$KV.sites.site-a")
