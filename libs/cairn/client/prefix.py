"""Ids and names typed short: any unique prefix stands for the whole (git-style).

An exact match always wins; otherwise the one candidate that starts with what was typed. None
is `NotFound`; several is `InvalidInput` listing them, so the user can type more. Job ids may
be typed without their `j-`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cairn.errors import InvalidInput, InvalidName, NotFound

if TYPE_CHECKING:
    from cairn.client.core import Client

MAX_LISTED = 10
"""Candidates an ambiguity error names before it says how many more there are."""

JOB_ID = re.compile(r"^j-[0-9a-z]{26}$")
"""A whole job id (`cairn.names.new_job_id`): used as is, without listing the study's jobs."""

_PREFIX = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def resolve_prefix(given: str, candidates: Iterable[str], *, kind: str,
                   where: str = "") -> str:
    """The one candidate `given` names: itself, or the only one it is a prefix of.

    Args:
        given: What was typed.
        candidates: Every name it may stand for.
        kind: What they are ("job", "recipe"), for messages and the error's field.
        where: Where they were looked up ("in study demo"), for messages.

    Raises:
        InvalidName: `given` could not start any name.
        NotFound: no candidate starts with it.
        InvalidInput: several do (each is listed).
    """
    if not isinstance(given, str) or not _PREFIX.fullmatch(given):
        raise InvalidName(f"{given!r} cannot start a {kind} name (lowercase letters, digits "
                          "and dashes)", field=kind)
    names = sorted(set(candidates))
    if given in names:
        return given
    matches = [n for n in names if n.startswith(given)]
    if kind == "job" and not matches and not given.startswith("j-"):
        matches = [n for n in names if n.startswith("j-" + given)]
    if len(matches) == 1:
        return matches[0]
    suffix = f" {where}" if where else ""
    if not matches:
        raise NotFound(f"no {kind} named {given!r}{suffix}", field=kind)
    listed = ", ".join(matches[:MAX_LISTED])
    more = f" and {len(matches) - MAX_LISTED} more" if len(matches) > MAX_LISTED else ""
    raise InvalidInput(f"{given!r} is ambiguous: {len(matches)} {kind}s{suffix} start with "
                       f"it: {listed}{more} (type more of it)", field=kind)


async def resolve_job(client: Client, given: str) -> str:
    """The whole id of the session study's job that `given` names (a whole id is used as is:
    the coordinator says when there is no such job)."""
    if JOB_ID.fullmatch(given):
        return given
    ids = [j.job for j in await client.jobs()]
    return resolve_prefix(given, ids, kind="job", where=f"in study {client.study}")
