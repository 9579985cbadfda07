"""The one subject an event belongs on, and the owner check every service applies.

Both come from the subject table: an event type has exactly one row, and the row's
placeholders are filled from the event's own fields (its verb from its tag). The broker lets
only a row's writers publish on its subjects, so an event that arrived on the subject its
content names was written by the owner of that content. One that did not is a forgery (or a
bug) and is never acted on, live or in replay.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from cairn.errors import CairnError, InvalidName
from cairn.events import Event, tag_of
from cairn.names import _NAME
from cairn.subjects.table import (
    _PLACEHOLDER,
    _STREAM_NAME,
    Subject,
    fill_with,
    rows_of_event,
)


@cache
def _row_of(event_type: type[Event]) -> Subject | None:
    rows = rows_of_event(event_type)
    return rows[0] if len(rows) == 1 else None


@cache
def _builder(event_type: type[Event]) -> Callable[[Event], str] | None:
    """How an event of this type makes its subject: the row's pattern with its verb filled
    in once, and its other placeholders from the event's fields, each checked by the name
    rule (`fill_with`'s, at a fraction of its cost: this runs on every publish)."""
    row = _row_of(event_type)
    if row is None:
        return None
    tag = tag_of(event_type)
    verb = tag.rsplit(".", 1)[-1]
    if "verb" in row.placeholders:
        fill_with("{verb}", {"verb": verb})  # a tag whose verb breaks the rule: raise now
    pattern = _PLACEHOLDER.sub(lambda m: verb if m.group(1) == "verb" else "{}", row.pattern)
    names = [n for n in row.placeholders if n != "verb"]
    checks = [(n, _STREAM_NAME if n == "stream" else _NAME) for n in names]

    def build(event: Event) -> str:
        values = []
        for name, rule in checks:
            value = getattr(event, name, None)
            if not isinstance(value, str):
                raise InvalidName(f"a {tag} needs its {name}", field=name)
            if rule.fullmatch(value) is None:
                fill_with("{" + name + "}", {name: value})  # raises the rule's own error
            values.append(value)
        return pattern.format(*values)

    return build


def subject_of(event: Event) -> str:
    """The one subject an event is published on.

    Raises:
        InvalidName: the event has no row, or a field that becomes a token breaks the rule.
    """
    build = _builder(type(event))
    if build is None:
        raise InvalidName(f"no subject for event type {tag_of(event)!r}", field="type")
    return build(event)


def misplaced(event: object, subject: str) -> str:
    """Why `event` must not be acted on, having arrived on `subject` ("" when it may).

    Checks that the subject is the one the event's content names (so its study, job, site,
    role and recipe are the subject's, and its type is one the subject's writer writes), and
    that a launch id it carries is that worker's own.
    """
    if not isinstance(event, Event):
        return ""
    try:
        expected = subject_of(event)
    except CairnError as exc:
        return f"not its owner's subject: {exc}"
    if expected != subject:
        return f"not its owner's subject: this {tag_of(event)} belongs on {expected}"
    launch_id = getattr(event, "launch_id", None)
    if isinstance(launch_id, str):
        own = _own_launch_id(event)
        if own is not None and launch_id != own:
            return (f"not its owner's launch: a {tag_of(event)} of {own} names launch "
                    f"{launch_id!r}")
    return ""


def _own_launch_id(event: Event) -> str | None:
    from cairn.state.launch import make_launch_id

    fields = [getattr(event, f, None) for f in ("job", "site", "role", "rank", "attempt")]
    job, site, role, rank, attempt = fields
    if not (isinstance(job, str) and isinstance(site, str) and isinstance(role, str)
            and isinstance(rank, int) and isinstance(attempt, int)):
        return None
    return make_launch_id(job, site, role, rank, attempt)


# -- templates: a subject with its names as placeholders -----------------------------------

@cache
def _known_verbs() -> frozenset[str]:
    """Every verb a Cairn subject ends in: the table's, and every request's."""
    from typing import get_args

    from cairn.api.requests import Request
    from cairn.subjects.table import SUBJECTS

    return frozenset({v for row in SUBJECTS for v in row.verbs}
                     | {str(t.__struct_config__.tag) for t in get_args(Request)}
                     | {"studies", "logs", "snapshot"})


@cache
def _templates() -> tuple[tuple[list[str], bool], ...]:
    from cairn.subjects.table import SUBJECTS

    out = []
    for row in SUBJECTS:
        if row.kind == "store" or not row.pattern.startswith("cairn."):
            continue
        tokens = row.pattern.split(".")
        rest = tokens[-1] == ">"
        out.append((tokens[:-1] if rest else tokens, rest))
    return tuple(out)


def template(subject: str) -> str | None:
    """The subject with its names replaced by placeholders, e.g.
    `cairn.study.{study}.job.{job}.submitted`: what stays the same from one job, site or study
    to the next (a span's name, a metric's label). A verb Cairn does not use becomes `{verb}`,
    so a subject a stranger made up names nothing; None for a subject that is not Cairn's."""
    tokens = subject.split(".")
    for pattern, rest in _templates():
        if len(tokens) < len(pattern) or (not rest and len(tokens) != len(pattern)):
            continue
        out = []
        for want, got in zip(pattern, tokens, strict=False):
            if want == "{verb}":
                out.append(got if got in _known_verbs() else "{verb}")
            elif want.startswith("{"):
                out.append(want)
            elif want != got:
                break
            else:
                out.append(got)
        else:
            return ".".join(out) + (".>" if rest and len(tokens) > len(pattern) else "")
    return None
