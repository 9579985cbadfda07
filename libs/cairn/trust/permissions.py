"""What the broker lets each identity publish and subscribe: the subject table's rows, bound
to the identity's own site, job, role and the studies it belongs to now.

Pure: (identity, membership) -> `Permissions`. The authority computes this at every connect
and again whenever membership changes (then it disconnects connections whose permissions
changed, and they come back under the new ones). Nothing here names a subject: every pattern
comes from `cairn.subjects.table`, and JetStream's API subjects are spelled once, below.

Reading a stored subject means a consumer, and a consumer is a name on a stream. An
identity may create, pull from, inspect and delete only consumers whose names are its own:
its durables from the table and a few ephemeral names (`owned_names`). JetStream's other
forms of creating a consumer (an unnamed `CONSUMER.CREATE.<stream>`, whose body may name any
existing consumer) are never granted except to the hub.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterable, Mapping

import msgspec

from cairn.subjects.table import (
    CONSUMERS,
    EPHEMERAL_SLOTS,
    STREAMS,
    SUBJECTS,
    WORKER_SLOTS,
    Access,
    Holder,
    Role,
    Scope,
    consumer_owner,
    fill,
    fill_with,
    js_ack,
    js_api,
    js_consumer,
    js_consumer_create,
    js_domain_api,
    js_stream,
    obj_meta_subject,
    owned_names,
    reply_inboxes,
)
from cairn.trust.credentials import Identity, Kind


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


_ROLES: dict[Kind, frozenset[Role]] = {
    Kind.HUB: frozenset({Role.COORDINATOR, Role.VALIDATOR, Role.SIGNER, Role.AGENT,
                         Role.LAUNCHER, Role.SNAPSHOTTER}),
    Kind.SITE: frozenset({Role.AGENT, Role.LAUNCHER, Role.SNAPSHOTTER}),
    Kind.WORKER: frozenset({Role.WORKER}),
    Kind.API: frozenset({Role.API}),
}


def studies_of(identity: Identity, membership: Mapping[str, Membership]) -> list[str]:
    """The studies an identity belongs to, now."""
    match identity.kind:
        case Kind.HUB | Kind.API:
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
        case Kind.READER:
            return [identity.study] if identity.study in membership else []
    return []


def holder_of(identity: Identity, membership: Mapping[str, Membership]) -> Holder:
    """What the table's scopes bind to for `identity`, given membership now."""
    studies, sites = _known(tuple(membership.items()))
    return dataclasses.replace(_holder(identity, membership), known_studies=studies,
                               known_sites=sites)


@functools.lru_cache(maxsize=16)
def _known(membership: tuple[tuple[str, Membership], ...]
           ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every study and every member site, sorted: once per membership, not once per
    connection (with 10,000 sites, sorting them at each admission was most of its cost)."""
    return (tuple(sorted(s for s, _ in membership)),
            tuple(sorted({site for _, m in membership for site in m.sites})))


def _holder(identity: Identity, membership: Mapping[str, Membership]) -> Holder:
    studies = studies_of(identity, membership)
    owner = consumer_owner(identity.kind.value, identity.name, identity.site)
    match identity.kind:
        case Kind.HUB:
            return Holder(kind="hub", roles=_ROLES[Kind.HUB], site=identity.site,
                          studies=None, member_sites=None, owner=owner)
        case Kind.API:
            # Every study and site: the API answers each caller with what the caller may
            # read (`cairn.httpapi.scope`), so it must see what any caller could.
            return Holder(kind="api", roles=_ROLES[Kind.API], studies=None,
                          member_sites=None, owner=owner)
        case Kind.SITE:
            return Holder(kind="site", roles=_ROLES[Kind.SITE], site=identity.site,
                          studies=tuple(studies), owner=owner)
        case Kind.ADMIN:
            if identity.admin_role == "project_admin":
                return Holder(kind="admin", roles=frozenset({Role.ADMIN, Role.PROJECT_ADMIN}),
                              studies=None, member_sites=None, owner=owner)
            sites = sorted({s for st in studies for s in membership[st].sites})
            return Holder(kind="admin", roles=frozenset({Role.ADMIN}), studies=tuple(studies),
                          member_sites=tuple(sites), owner=owner)
        case Kind.WORKER:
            # A worker whose site left its study (or whose study is gone) keeps no right.
            worker_roles = _ROLES[Kind.WORKER] if studies else frozenset()
            return Holder(kind="worker", roles=worker_roles, site=identity.site,
                          studies=tuple(studies), study=identity.study, job=identity.job,
                          role=identity.role, owner=owner, slots=WORKER_SLOTS)
        case Kind.READER:
            reads = frozenset({Role.READER, *([Role.DATA_READER] if identity.data else [])})
            return Holder(kind="reader", roles=reads if studies else frozenset(),
                          studies=tuple(studies), study=identity.study, owner=owner)
    return Holder(kind="none", roles=frozenset())


def permissions(identity: Identity, user_key: str,
                membership: Mapping[str, Membership]) -> Permissions:
    """What `identity` (connected with `user_key`) may publish and subscribe."""
    return derive(holder_of(identity, membership), inbox_prefix(user_key))


def derive(holder: Holder, inbox: str) -> Permissions:
    """The rows of the table that `holder`'s roles name, bound to its tokens."""
    pub, sub = _rows(holder)
    return Permissions(pub_allow=pub, sub_allow=_unique((f"{inbox}.>", *sub)))


@functools.lru_cache(maxsize=4096)
def _rows(holder: Holder) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Cached: the authority asks again for every connection whenever membership changes,
    # and a holder (an identity under one membership) always gets the same answer.
    hub = holder.kind == "hub"
    pub: list[str] = []
    sub: list[str] = []
    names = owned_names(holder.owner, holder.slots)
    readable: list[str] = []
    for row in SUBJECTS:
        if "stream" in row.placeholders:
            continue  # bound to the streams the holder reads: below
        for access in _mine(row.writers, holder):
            pub += _expand(row.pattern, access, holder, row.verbs)
        for access in _mine(row.readers, holder):
            sub += _expand(row.pattern, access, holder, row.verbs)
            if row.kind == "request":
                # Its answers, on the asker's inbox for this subject (`reply_inbox`).
                pub += [reply_inboxes(r) for r in _expand(row.pattern, access, holder,
                                                            row.verbs)]
        if row.kind == "store" and row.stream:
            # Writing a bucket through JetStream's helpers looks up its stream first; an
            # object's writer also asks whether the object is there already.
            for access in _mine(row.writers, holder):
                for name in _expand(row.stream, access, holder, ()):
                    pub.append(js_stream("STREAM.INFO", name))
                    if name.startswith("OBJ_"):
                        bucket = name.removeprefix("OBJ_")
                        pub.append(js_stream("DIRECT.GET", name, obj_meta_subject(bucket)))
    for stream in STREAMS:
        for read in stream.reads:
            for access in _mine((read.access,), holder):
                # The hub reads every site's and study's stream through JetStream's whole
                # API (below), so its live subjects stay wildcards (`cairn.site.*.launch.>`):
                # its rights do not grow with the federation.
                for name in _expand(stream.name, access, holder, (), each_known=not hub):
                    readable.append(name)
                    tokens = _tokens_of(stream.name, name)
                    stored = [_wild(fill_with(s, tokens, wildcards=True))
                              for s in stream.subjects]
                    if read.filter is None:
                        filters = None
                        live = stored
                    else:
                        # Only what the stream holds of the filter: `cairn.site.a.*` of
                        # FEDERATION is its snapshot, drift and config, not its heartbeat.
                        filters = [c for f in _expand(read.filter, access, holder, ())
                                   for s in stored if (c := _intersect(f, s))]
                        live = filters
                    if not hub:
                        pub += _stream_read(name, filters, names)
                    if stream.store in ("events", "files"):
                        sub += live
    for consumer in () if hub else CONSUMERS:
        for access in _mine((consumer.owner,), holder):
            for stream_name in _expand(consumer.stream, access, holder, ()):
                for durable in _expand(consumer.name, access, holder, ()):
                    pub += _durable(stream_name, durable)
    for row in SUBJECTS:
        if "stream" in row.placeholders:
            for access in _mine(row.writers, holder):
                if access.bound("stream") is Scope.MEMBER:
                    pub += [fill(row.pattern, stream=s) for s in readable if "*" not in s]
                else:
                    pub += _expand(row.pattern, access, holder, ())
    if hub:
        # The hub makes and keeps the federation's streams and buckets, and runs services
        # that read them with JetStream's own helpers (ordered consumers): all of JetStream's
        # API, which covers every grant of it above.
        pub = [p for p in pub if not p.startswith((js_api(""), "$JS.ACK."))]
        pub += [js_api(">"), "$JS.ACK.>", "$JS.FC.>"]
    if holder.kind == "site":
        # A site's parent on its leaf node names the federation's JetStream by its domain
        # (cairn.runtime.leaf): the same API calls, each under that name too.
        pub += [js_domain_api(p) for p in pub if p.startswith((js_api(""), "$KV."))]
    if hub:
        # Its wildcards over sites and studies cover its own site's rows: say each once.
        return _narrowest(pub), _narrowest(sub)
    return _unique(pub), _unique(sub)


def _narrowest(items: Iterable[str]) -> tuple[str, ...]:
    """`items` once each, in order, without those another item's wildcards cover already
    (`cairn.site.hub.snapshot` beside `cairn.site.*.snapshot`): the same rights, shorter."""
    unique = _unique(items)
    wild = [p for p in unique if "*" in p.split(".") or p.endswith(".>")]
    return tuple(s for s in unique if not any(w != s and covers(w, s) for w in wild))


def _mine(accesses: Iterable[Access], holder: Holder) -> list[Access]:
    return [a for a in accesses if a.role in holder.roles]


def _own_token(holder: Holder, placeholder: str) -> str | None:
    match placeholder:
        case "site":
            return holder.site or None
        case "job":
            return holder.job or None
        case "role":
            return holder.role or None
        case "study":
            return holder.study or None
    return None


def _values(placeholder: str, access: Access, holder: Holder,
            verbs: tuple[str, ...]) -> list[str]:
    """The tokens one placeholder takes for `holder` under `access` (empty: no right)."""
    if placeholder == "verb":
        return list(verbs) or ["*"]
    scope = access.bound(placeholder)
    if scope is Scope.OWN:
        own = _own_token(holder, placeholder)
        return [own] if own else []
    if scope is Scope.MEMBER:
        if placeholder == "study":
            return ["*"] if holder.studies is None else list(holder.studies)
        if placeholder == "site":
            return ["*"] if holder.member_sites is None else list(holder.member_sites)
    return ["*"]


def _expand(pattern: str, access: Access, holder: Holder, verbs: tuple[str, ...], *,
            each_known: bool = True) -> list[str]:
    """`pattern` filled with each choice of tokens `holder` has under `access`. A wildcard
    inside a token (`KV_launches_{site}`) is no NATS wildcard: with `each_known`, it becomes each
    known study or site; without, the whole token becomes `*`."""
    from cairn.subjects.table import _PLACEHOLDER

    placeholders = list(dict.fromkeys(_PLACEHOLDER.findall(pattern)))
    choices = [_values(p, access, holder, verbs) for p in placeholders]
    for i, name in enumerate(placeholders):
        if each_known and choices[i] == ["*"] and _embedded(pattern, name):
            known = {"study": holder.known_studies, "site": holder.known_sites}.get(name)
            if known is not None:
                choices[i] = list(known)
    out = []
    for combo in itertools.product(*choices):
        out.append(_wild(fill_with(pattern, dict(zip(placeholders, combo, strict=True)),
                                   wildcards=True)))
    return out


def _embedded(pattern: str, placeholder: str) -> bool:
    """Whether `{placeholder}` is only part of a token (`KV_launches_{site}`)."""
    return any(f"{{{placeholder}}}" in t and t != f"{{{placeholder}}}"
               for t in pattern.split("."))


def _wild(subject: str) -> str:
    """A token that holds a wildcard is a wildcard (`KV_launches_*` -> `*`)."""
    return ".".join("*" if "*" in t and t != "*" else t for t in subject.split("."))


def covers(pattern: str, subject: str) -> bool:
    """Whether the NATS `pattern` matches every subject `subject` does (`subject` may hold
    wildcards itself): whether a right of `pattern` lets one subscribe to `subject`."""
    pat, sub = pattern.split("."), subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or sub[i] == ">" or token not in ("*", sub[i]):
            return False
    return len(pat) == len(sub)


def _intersect(a: str, b: str) -> str | None:
    """The subjects two patterns both match, as one pattern (None: they share none)."""
    x, y = a.split("."), b.split(".")
    out: list[str] = []
    for i in range(max(len(x), len(y))):
        p = x[i] if i < len(x) else None
        q = y[i] if i < len(y) else None
        if p == ">" or q == ">":
            rest = y[i:] if p == ">" else x[i:]
            if p == ">" and q == ">":
                rest = [">"]
            return ".".join(out + rest) if rest else None
        if p is None or q is None:
            return None
        if p == "*":
            out.append(q)
        elif q == "*" or p == q:
            out.append(p)
        else:
            return None
    return ".".join(out)


def _tokens_of(template: str, name: str) -> dict[str, str]:
    """The tokens a stream name was filled with (`STUDY_{study}`, `STUDY_s1` -> s1)."""
    prefix, _, rest = template.partition("{")
    if not rest:
        return {}
    placeholder = rest.split("}", 1)[0]
    value = name[len(prefix):] if name != "*" else "*"
    return {placeholder: value}


def _stream_read(stream: str, filters: list[str] | None, names: tuple[str, ...]) -> list[str]:
    """Reading `stream` (whole, or only `filters`) through the holder's own consumers."""
    out = [js_stream("STREAM.INFO", stream)]
    if filters is None:
        out += [js_stream("STREAM.MSG.GET", stream), js_stream("DIRECT.GET", stream),
                js_stream("DIRECT.GET", stream, ">")]
        for name in names:
            out += [js_consumer_create(stream, name), js_consumer_create(stream, name, ">")]
    else:
        for f in filters:
            out.append(js_stream("DIRECT.GET", stream, f))
            out += [js_consumer_create(stream, name, f) for name in names]
    for name in names:
        out += [js_consumer(verb, stream, name) for verb in ("MSG.NEXT", "DELETE", "INFO")]
    return out


def _durable(stream: str, name: str) -> list[str]:
    return [js_consumer_create(stream, name), js_consumer_create(stream, name, ">"),
            *(js_consumer(verb, stream, name)
              for verb in ("DURABLE.CREATE", "MSG.NEXT", "INFO", "DELETE")),
            js_ack(stream, name)]


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


__all__ = ["EPHEMERAL_SLOTS", "Membership", "Permissions", "derive",
           "holder_of", "inbox_prefix", "permissions", "studies_of"]
