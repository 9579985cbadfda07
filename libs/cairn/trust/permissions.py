"""What the broker lets each identity publish and subscribe: DESIGN.md's subject table,
limited to the identity's own site token and the studies it belongs to.

Pure: (identity, membership) -> `Permissions`. The authority computes this at every
connect and again whenever membership changes (then it disconnects connections whose
permissions changed, and they come back under the new ones).

JetStream is reached through its API subjects, so reading a stream means being allowed
`$JS.API.CONSUMER.*.<stream>...`; every identity gets those only for its own streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from cairn import subjects
from cairn.spec.runtime import VALIDATION_STUDY
from cairn.trust.credentials import Identity, Kind

JS = "$JS.API"


class Membership(msgspec.Struct, frozen=True, kw_only=True):
    """One study's members as the study stream says now."""

    sites: frozenset[str] = frozenset()
    admins: frozenset[str] = frozenset()


class Permissions(msgspec.Struct, frozen=True, kw_only=True):
    pub_allow: tuple[str, ...]
    sub_allow: tuple[str, ...]
    sub_deny: tuple[str, ...] = ()
    expires: int = 0

    def claims(self) -> dict[str, object]:
        """The `nats` permission claims of a user JWT."""
        sub: dict[str, object] = {"allow": list(self.sub_allow)}
        if self.sub_deny:
            sub["deny"] = list(self.sub_deny)
        # Replies to requests this identity received (health, API answers) are allowed once.
        return {"pub": {"allow": list(self.pub_allow)}, "sub": sub,
                "resp": {"max": 1, "ttl": 0}}


def inbox_prefix(user_key: str) -> str:
    """Each connection's own reply inbox, so no one else can read its replies."""
    return f"_INBOX.{user_key}"


def _read_stream(stream: str) -> list[str]:
    return [f"{JS}.STREAM.INFO.{stream}", f"{JS}.CONSUMER.CREATE.{stream}",
            f"{JS}.CONSUMER.CREATE.{stream}.>", f"{JS}.CONSUMER.DURABLE.CREATE.{stream}.>",
            f"{JS}.CONSUMER.INFO.{stream}.>", f"{JS}.CONSUMER.DELETE.{stream}.>",
            f"{JS}.CONSUMER.MSG.NEXT.{stream}.>", f"{JS}.STREAM.MSG.GET.{stream}",
            f"{JS}.DIRECT.GET.{stream}", f"{JS}.DIRECT.GET.{stream}.>", f"$JS.ACK.{stream}.>",
            f"$JS.FC.{stream}.>"]


def _kv(bucket: str) -> str:
    return f"KV_{bucket}"


def _obj(bucket: str) -> str:
    return f"OBJ_{bucket}"


def studies_of(identity: Identity, membership: Mapping[str, Membership]) -> list[str]:
    """The studies an identity belongs to, now."""
    match identity.kind:
        case Kind.HUB:
            return sorted(membership)
        case Kind.SITE:
            return sorted(s for s, m in membership.items() if identity.site in m.sites)
        case Kind.ADMIN:
            if identity.admin_role == "project_admin":
                return sorted(membership)
            return sorted(s for s, m in membership.items() if identity.name in m.admins)
        case Kind.WORKER:
            member = membership.get(identity.study)
            return [identity.study] if member and identity.site in member.sites else []
    return []


def permissions(identity: Identity, user_key: str,
                membership: Mapping[str, Membership]) -> Permissions:
    """What `identity` (connected with `user_key`) may publish and subscribe."""
    studies = studies_of(identity, membership)
    inbox = f"{inbox_prefix(user_key)}.>"
    match identity.kind:
        case Kind.HUB:
            return _hub(inbox)
        case Kind.SITE:
            return _site(identity.site, studies, membership, inbox)
        case Kind.ADMIN:
            return _admin(identity, studies, membership, inbox)
        case Kind.WORKER:
            return _worker(identity, studies, inbox)
    return Permissions(pub_allow=(), sub_allow=())


def _hub(inbox: str) -> Permissions:
    # The hub runs the coordinator: it owns studies, jobs and dispatch, so it is trusted with
    # every Cairn subject and the JetStream API. It still never writes as a worker.
    return Permissions(pub_allow=("cairn.>", "$JS.>", "$KV.>", "$O.>", "_INBOX.>"),
                       sub_allow=("cairn.>", inbox, "$JS.>"))


def _site(site: str, studies: list[str], membership: Mapping[str, Membership],
          inbox: str) -> Permissions:
    pub: list[str] = [
        subjects.site_launch_all(site), f"{subjects.ROOT}.site.{site}.*",
        f"{JS}.INFO", f"{JS}.STREAM.NAMES",
        f"{JS}.STREAM.INFO.{subjects.DEADLETTER_STREAM.name}",
        f"$KV.{subjects.KV_SITES}.{site}", f"$KV.{subjects.kv_launches(site)}.>",
        f"$O.{subjects.OBJ_SNAPSHOTS}.>",
        f"{subjects.ROOT}.api.site.{site}.*", f"{subjects.ROOT}.health.*.{site}",
        # Node-collection jobs onto itself (checked again by the coordinator).
        subjects.api_study(VALIDATION_STUDY, "submit"),
        subjects.api_study(VALIDATION_STUDY, "job"), subjects.api_study(VALIDATION_STUDY, "jobs"),
        subjects.deadletter(subjects.site_stream(site).name),
        subjects.deadletter(subjects.FEDERATION_STREAM.name),
        subjects.deadletter(_kv(subjects.kv_launches(site))),
        subjects.deadletter(_kv(subjects.KV_SITES)),
    ]
    # No stream is created or changed by a site: a stream's subjects are chosen by its
    # creator, so creating one could capture subjects the site may not read. The authority
    # makes the site's own streams before it lets the site in.
    for stream in (subjects.site_stream(site).name, _kv(subjects.kv_launches(site)),
                   subjects.FEDERATION_STREAM.name, subjects.EVIDENCE_STREAM.name,
                   _kv(subjects.KV_SITES), _obj(subjects.OBJ_SNAPSHOTS)):
        pub += _read_stream(stream)
    for study in studies:
        pub += [subjects.site_job_events(study, site),
                subjects.deadletter(subjects.study_stream(study).name)]
        pub += _read_stream(subjects.study_stream(study).name)
        pub += _read_stream(_obj(subjects.obj_artifacts(study)))
    sub = [inbox, f"{subjects.ROOT}.health.*.{site}", f"{subjects.ROOT}.api.site.{site}.*",
           f"{subjects.ROOT}.site.{site}.>", subjects.study_admin_all()]
    # The agent listens to every study's admin events to notice a study it joins; those of
    # studies it is not in are filtered out by the server.
    deny = [subjects.study_admin_all(s) for s in sorted(membership) if s not in studies]
    for study in studies:
        sub += [subjects.site_cmds(study, site), subjects.site_job_events(study, site)]
    return Permissions(pub_allow=_unique(pub), sub_allow=_unique(sub), sub_deny=_unique(deny))


def _admin(identity: Identity, studies: list[str], membership: Mapping[str, Membership],
           inbox: str) -> Permissions:
    if identity.admin_role == "project_admin":
        return _project_admin(inbox)
    pub: list[str] = [subjects.api_fed_all(), f"{subjects.ROOT}.health.>", f"{JS}.INFO",
                      f"{JS}.STREAM.NAMES"]
    for stream in (subjects.FEDERATION_STREAM.name, _kv(subjects.KV_SITES),
                   subjects.EVIDENCE_STREAM.name, _obj(subjects.OBJ_EVIDENCE),
                   _obj(subjects.OBJ_SNAPSHOTS)):
        pub += _read_stream(stream)
    sites: set[str] = set()
    for study in studies:
        pub.append(_any_verb(subjects.api_study(study, "any")))
        artifacts = subjects.obj_artifacts(study)
        pub += [f"$O.{artifacts}.>"]
        pub += _read_stream(subjects.study_stream(study).name)
        pub += _read_stream(subjects.data_stream(study).name)
        pub += _read_stream(_obj(artifacts))
        sites |= membership[study].sites if study in membership else set()
    for site in sorted(sites):
        pub += [subjects.site_logs(site), subjects.site_snapshot_request(site)]
    return Permissions(pub_allow=_unique(pub), sub_allow=(inbox,))


def _project_admin(inbox: str) -> Permissions:
    # Every study, present and future, by wildcard: a new study changes nothing here, so
    # creating one does not disconnect the admin who created it.
    pub = [subjects.api_fed_all(), subjects.api_study_all(), f"{subjects.ROOT}.health.>",
           f"{subjects.ROOT}.api.site.*.logs", f"{subjects.ROOT}.api.site.*.snapshot",
           _any_verb(subjects.api_validation("any")),
           f"{JS}.INFO", f"{JS}.STREAM.NAMES", "$O.*.>",
           f"{JS}.STREAM.MSG.DELETE.{subjects.DEADLETTER_STREAM.name}"]
    for stream in ("*", ):
        pub += _read_stream(stream)
    return Permissions(pub_allow=_unique(pub), sub_allow=(inbox,))


def _worker(identity: Identity, studies: list[str], inbox: str) -> Permissions:
    if not studies:
        return Permissions(pub_allow=(), sub_allow=(inbox,))
    study, job = identity.study, identity.job
    data = subjects.data_all(study, job)
    job_events = subjects.job_all(study, job)
    study_stream = subjects.study_stream(study).name
    data_stream = subjects.data_stream(study).name
    artifacts = _obj(subjects.obj_artifacts(study))
    pub = [
        _any_verb(subjects.job_worker(study, job, identity.site, identity.role, "any")), data,
        # STREAM.NAMES: nats-py finds an object store's stream by subject when it reads one.
        f"$O.{subjects.obj_artifacts(study)}.>", f"{JS}.INFO", f"{JS}.STREAM.NAMES",
        f"{JS}.STREAM.INFO.{study_stream}", f"{JS}.STREAM.INFO.{data_stream}",
        # Reads of the study's streams only through consumers filtered on this job.
        f"{JS}.CONSUMER.CREATE.{study_stream}.*.{job_events}",
        f"{JS}.CONSUMER.CREATE.{data_stream}.*.{data}",
        f"{JS}.CONSUMER.MSG.NEXT.{study_stream}.>", f"{JS}.CONSUMER.MSG.NEXT.{data_stream}.>",
        f"{JS}.CONSUMER.DELETE.{study_stream}.>", f"{JS}.CONSUMER.DELETE.{data_stream}.>",
        *_read_stream(artifacts),
    ]
    return Permissions(pub_allow=_unique(pub), sub_allow=(inbox, data, job_events),
                       expires=0)


def _any_verb(subject: str) -> str:
    """`cairn.api.study.s1.any` -> `cairn.api.study.s1.*` (subjects builds literal verbs)."""
    return subject.rsplit(".", 1)[0] + ".*"


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
