"""The site's log API (`cairn.api.site.<site>.logs`): a worker's captured log, for those
whose study the job is in.

In a secure federation every request is a signed envelope (`cairn.trust.requests`),
verified against the roots beside the site's credentials (`roots.txt`), and a caller reads
the log of a job of study S only if S is one of its own:

- an admin of S, as S's admin events say now (a project admin: any study);
- the hub, trusted with every study's control plane (its validator reads its check jobs'
  logs, acting for an admin);
- this very site, in a study it takes part in (its snapshotter's node-collection jobs).

Anyone else is refused with `PermissionDenied` naming who and which study. An insecure
federation takes requests unsigned, as it takes everything.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from pathlib import Path

from cairn import api
from cairn.errors import NotFound, PermissionDenied, Unavailable
from cairn.launcher.inputs import read_from
from cairn.launcher.records import LaunchRecord
from cairn.launcher.studies import Studies
from cairn.subjects import ApiAddress
from cairn.trust.credentials import Identity, Kind
from cairn.trust.requests import RAW_REQUEST, MemoryNonces, RequestVerifier

MAX_CHUNK = 1024 * 1024
ADMIN_CHECK_S = 4.0
"""How long finding out whether a caller was just made a study's admin may take: well inside
a client's request timeout (10 s by default), so a busy site says "try again" rather than
nothing at all."""


class LogReader:
    """Answers `LogRead` requests from the launcher's records (see the module docstring)."""

    def __init__(self, site: str, creds: str | None, records: Mapping[str, LaunchRecord],
                 studies: Studies) -> None:
        self.site = site
        self.records = records
        self.studies = studies
        # Nonces in memory: a replayed log read answers only the inbox of the one who asked.
        self._verifier = RequestVerifier.from_kit(creds, MemoryNonces()) if creds else None

    async def serve(self, envelope: api.Envelope, address: ApiAddress) -> api.Result:
        match envelope.request:
            case api.LogRead(launch_id=launch_id, offset=offset, max_bytes=max_bytes):
                pass
            case other:
                raise NotFound(f"the launcher does not serve {api.verb_of(other)!r}")
        # Who asks is settled before anything is looked up: a refusal tells nothing of
        # which launches exist.
        caller = ((await self._verifier.verify_signer(RAW_REQUEST.get() or b"", envelope))
                  .identity if self._verifier is not None else None)
        record = self.records.get(launch_id)
        study = envelope.study or (record.study if record is not None else None)
        if caller is not None and study is not None:
            await self._may_read(caller, study, launch_id)
        if record is None or record.study != study or record.handle is None:
            raise NotFound(f"no worker {launch_id} at site {self.site}", field="launch_id")
        offset = max(0, offset)
        limit = max(1, min(max_bytes, MAX_CHUNK))
        data = await asyncio.to_thread(read_from, Path(record.handle.log_path), offset, limit)
        done = record.state == "exited" and len(data) < limit
        return api.LogData(data_b64=base64.b64encode(data).decode(), offset=offset + len(data),
                           done=done)

    async def _may_read(self, caller: Identity, study: str, launch_id: str) -> None:
        """Raise unless `study` is one of the caller's own (see the module docstring)."""
        match caller.kind:
            case Kind.HUB:
                return
            case Kind.ADMIN if caller.admin_role == "project_admin":
                return
            case Kind.ADMIN:
                if await self._admin_of(caller.name, study):
                    return
                raise PermissionDenied(
                    f"{caller.name} is not an admin of study {study}, so may not read the "
                    f"log of {launch_id}", field="launch_id")
            case Kind.SITE if caller.site == self.site:
                if self.studies.is_member(study):
                    return
                raise PermissionDenied(f"site {self.site} is not in study {study}",
                                       field="launch_id")
            case Kind.SITE:
                raise PermissionDenied(f"site {caller.site} may not read the logs of site "
                                       f"{self.site}'s workers", field="launch_id")
        raise PermissionDenied(f"a {caller.kind.value} credential may not read logs",
                               field="key_id")

    async def _admin_of(self, name: str, study: str) -> bool:
        state = self.studies.study(study)
        if state is not None and name in state.admins:
            return True
        # Perhaps just added: read what the study's consumer has not handled yet.
        try:
            async with asyncio.timeout(ADMIN_CHECK_S):
                if not await self.studies.ensure(study):
                    return False
                await self.studies.catch_up(study)
        except TimeoutError:
            raise Unavailable(f"site {self.site} could not tell within {ADMIN_CHECK_S:g}s "
                              f"whether {name} is an admin of study {study}; try again") \
                from None
        state = self.studies.study(study)
        return state is not None and name in state.admins
