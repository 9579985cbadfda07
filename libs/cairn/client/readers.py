"""A reader's session (`cairn provision reader`): it reads its study's streams, asks nothing.

A reader's credential may publish no request at all, so the broker drops one without an
answer and its sender would wait for a timeout: the client refuses it before sending, and
says what a reader can do instead.
"""

from __future__ import annotations

import functools

from cairn.errors import PermissionDenied
from cairn.trust.connect import identity_of
from cairn.trust.credentials import Identity, Kind


@functools.lru_cache(maxsize=16)
def _reader(creds: str) -> Identity | None:
    identity = identity_of(creds)
    return identity if identity.kind is Kind.READER else None


def refuse_if_reader(creds: str | None, what: str) -> None:
    """Raise when the session's credential is a reader's; `what` says what it needs.

    Raises:
        PermissionDenied: it is a reader's.
    """
    reader = _reader(creds) if creds else None
    if reader is not None:
        raise PermissionDenied(
            f"{what}, and this session's credential is reader {reader.name}'s: a reader only "
            f"reads study {reader.study}'s streams (`cairn events tail`, `cairn replay`, or "
            "any NATS client: docs/events.md)")
