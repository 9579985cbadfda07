"""The request/reply contract between clients and the coordinator.

A client sends a JSON `Request` on `cairn.api.fed.<verb>` (federation-wide verbs) or
`cairn.api.study.<study>.<verb>` (study verbs); the coordinator answers with a `Reply`:
`{"ok": true, "result": ...}` or `{"ok": false, "error": {"code", "message", "field"}}`.
Until the security work lands, `actor` is taken on trust.

Federation verbs: `study-create`, `study-list`, `site-list`, `federation`.
Study verbs: `show`, `add-site`, `remove-site`, `add-admin`, `remove-admin`, `submit`, `jobs`,
`job`, `cancel`, `sites`, `site`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from cairn.events import Resources, StudyAdmin

FED_VERBS = ("study-create", "study-list", "site-list", "federation")
STUDY_VERBS = ("show", "add-site", "remove-site", "add-admin", "remove-admin", "submit",
               "jobs", "job", "cancel", "sites", "site")


class Request(msgspec.Struct, kw_only=True):
    actor: str | None = None
    args: dict[str, Any] = {}


class Reply(msgspec.Struct, kw_only=True):
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None


class SiteInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A site as the coordinator sees it (org from federation.yaml, the rest from heartbeats)."""

    name: str
    org: str = ""
    online: bool = False
    last_seen: datetime | None = None
    backend: str = ""
    capacity: Resources | None = None
    free: Resources | None = None
    running: int = 0
    studies: tuple[str, ...] = ()
    hub: bool = False


class FederationInfo(msgspec.Struct, frozen=True, kw_only=True):
    federation: str
    hub: str
    sites: tuple[str, ...] = ()
    admins: tuple[StudyAdmin, ...] = ()
    studies: tuple[str, ...] = ()


REQUEST_ENCODER = msgspec.json.Encoder()
REQUEST_DECODER = msgspec.json.Decoder(Request)
REPLY_DECODER = msgspec.json.Decoder(Reply)
