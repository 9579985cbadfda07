"""The name rule: every name that becomes a subject token is checked here, and only here."""

from __future__ import annotations

import os
import re
import time

from cairn.errors import InvalidName

NAME_RULE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
_NAME = re.compile(NAME_RULE)


def check_name(value: object, kind: str = "name") -> str:
    """Return `value` if it obeys the name rule, else raise `InvalidName` naming `kind`.

    The rule (lowercase letters, digits and inner dashes, 1-63 characters) keeps every name a
    single, literal subject token: no dots, no wildcards, no spaces.
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidName(
            f"{value!r} is not a valid {kind} name: use 1-63 lowercase letters, digits and "
            "dashes, starting and ending with a letter or digit (no dots, '*', '>' or spaces)",
            field=kind,
        )
    return value


def is_name(value: object) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_ulid(now_ms: int | None = None) -> str:
    """A ULID in lowercase Crockford base32: 26 characters, sortable by creation time."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_event_id() -> str:
    return new_ulid()


def new_job_id() -> str:
    """A job id that obeys the name rule: `j-` and a lowercase ULID."""
    return "j-" + new_ulid()
