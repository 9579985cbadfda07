"""What the subject table says one holder may do with one concrete subject or stream.

A second reading of `cairn.subjects.table`, written apart from `cairn.trust.permissions`
(which turns the same rows into the NATS patterns the broker enforces): it matches a concrete
subject against each row instead of expanding rows into patterns. The rights matrix test
holds the real server's verdicts to this.
"""

from __future__ import annotations

import re
from functools import cache

from cairn.subjects.table import (
    CONSUMERS,
    STREAMS,
    SUBJECTS,
    Access,
    Holder,
    Scope,
    owned_names,
)

_TOKEN = re.compile(r"\{([a-z_]+)\}")


@cache
def _regex(pattern: str, verbs: tuple[str, ...] = ()) -> re.Pattern[str]:
    out = []
    for part in re.split(r"(\{[a-z_]+\})", pattern):
        m = _TOKEN.fullmatch(part)
        if m:
            name = m.group(1)
            body = "|".join(map(re.escape, verbs)) if name == "verb" and verbs else "[^.]+"
            out.append(f"(?P<{name}>{body})")
        else:
            out.append(re.escape(part).replace(r"\*", "[^.]+").replace(">", ".+"))
    return re.compile("".join(out) + r"\Z")


def _bound(access: Access, tokens: dict[str, str], holder: Holder, readable: set[str]) -> bool:
    own = {"site": holder.site, "job": holder.job, "role": holder.role, "study": holder.study}
    for name, value in tokens.items():
        scope = access.bound(name)
        if name == "verb" or scope is Scope.ANY:
            continue
        if scope is Scope.OWN and value != own.get(name):
            return False
        if scope is Scope.MEMBER:
            if name == "study" and holder.studies is not None and value not in holder.studies:
                return False
            if name == "site" and holder.member_sites is not None and \
                    value not in holder.member_sites:
                return False
            if name == "stream" and value not in readable:
                return False
    return True


def _grants(accesses: tuple[Access, ...], pattern: str, verbs: tuple[str, ...],
            holder: Holder, subject: str, readable: set[str]) -> bool:
    m = _regex(pattern, verbs).match(subject)
    if not m:
        return False
    tokens = {k: v for k, v in m.groupdict().items() if v is not None}
    return any(a.role in holder.roles and _bound(a, tokens, holder, readable)
               for a in accesses)


def may_publish(holder: Holder, subject: str, readable: set[str]) -> bool:
    """Whether the table lets `holder` write (or, for a request, ask) on `subject`."""
    return any(_grants(r.writers, r.pattern, r.verbs, holder, subject, readable)
               for r in SUBJECTS)


def reads(holder: Holder, stream: str, filter_subject: str | None = None) -> bool:
    """Whether the table lets `holder` read `stream` (whole, or `filter_subject` of it)."""
    for row in STREAMS:
        m = _regex(row.name).match(stream)
        if not m:
            continue
        tokens = {k: v for k, v in m.groupdict().items() if v is not None}
        for read in row.reads:
            if read.access.role not in holder.roles or \
                    not _bound(read.access, tokens, holder, set()):
                continue
            if read.filter is None:
                return True
            if filter_subject is not None:
                pattern = read.filter
                for name, value in tokens.items():
                    pattern = pattern.replace("{" + name + "}", value)
                if _grants((read.access,), pattern, (), holder, filter_subject, set()):
                    return True
    return False


def may_subscribe(holder: Holder, subject: str) -> bool:
    """Live reads: a request or core subject the holder serves or reads, or a subject that
    a stream it reads (whole, or a filter covering the subject) stores."""
    if any(_grants(r.readers, r.pattern, r.verbs, holder, subject, set()) for r in SUBJECTS):
        return True
    for row in STREAMS:
        if row.store not in ("events", "files"):
            continue
        for template in row.subjects:
            m = _regex(template).match(subject)
            if not m:
                continue
            tokens = {k: v for k, v in m.groupdict().items() if v is not None}
            stream = _fill(row.name, tokens)
            if reads(holder, stream) or reads(holder, stream, subject):
                return True
    return False


def reads_any(holder: Holder, stream: str) -> bool:
    """Whether `holder` reads any of `stream` (whole, or a filter of it)."""
    for row in STREAMS:
        m = _regex(row.name).match(stream)
        if not m:
            continue
        tokens = {k: v for k, v in m.groupdict().items() if v is not None}
        if any(r.access.role in holder.roles and _bound(r.access, tokens, holder, set())
               for r in row.reads):
            return True
    return False


def writes_into(holder: Holder, stream: str) -> bool:
    """Whether `holder` writes a KV or object-store row stored in `stream`."""
    for row in SUBJECTS:
        if row.kind != "store" or row.stream is None:
            continue
        m = _regex(row.stream).match(stream)
        if not m:
            continue
        tokens = {k: v for k, v in m.groupdict().items() if v is not None}
        if any(a.role in holder.roles and _bound(a, tokens, holder, set())
               for a in row.writers):
            return True
    return False


def owns_durable(holder: Holder, stream: str, name: str) -> bool:
    """Whether `name` on `stream` is a durable the table gives one of `holder`'s roles."""
    for consumer in CONSUMERS:
        m = _regex(consumer.stream).match(stream)
        if not m or consumer.owner.role not in holder.roles:
            continue
        tokens = {k: v for k, v in m.groupdict().items() if v is not None}
        named = _regex(consumer.name).match(name)
        if named is None:
            continue
        tokens.update({k: v for k, v in named.groupdict().items() if v is not None})
        if _bound(consumer.owner, tokens, holder, set()):
            return True
    return False


def owns_consumer(holder: Holder, stream: str, name: str) -> bool:
    """Whether `holder` may pull from, inspect and delete `name` on `stream`: one of its own
    ephemeral names on a stream it reads, or one of its durables."""
    if holder.kind == "hub":
        return True
    if name in owned_names(holder.owner, holder.slots) and reads_any(holder, stream):
        return True
    return owns_durable(holder, stream, name)


def _fill(pattern: str, tokens: dict[str, str]) -> str:
    for name, value in tokens.items():
        pattern = pattern.replace("{" + name + "}", value)
    return pattern
