"""The launcher's studies: which the site takes part in, their admins, and its index of the
site's deploy commands, so a launch finds its deploy command by launch id.

Per study the site is in, one durable consumer (`Runtime.consume`) feeds the fold of
`cairn.launcher.state` with the study's admin events, the site's deploy commands and the
agent's rejections. Deploy commands not yet used, and how far the index has read, are kept
in KV `launches_<site>` (see `cairn.launcher.records`): a restarted launcher starts from
them, and its consumer goes on from where it was. A launch whose deploy command is not
indexed yet reads the few messages the consumer has not handled, from the index's mark on,
rather than waiting for it; nothing replays a study's whole history per launch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cairn import subjects
from cairn.bus import KV, Delivery, replay
from cairn.errors import CairnError, Unavailable
from cairn.events import STUDY_DECODER, DeployCommand, DeploymentRejected, Event, worker_ref
from cairn.launcher import state
from cairn.launcher.records import IndexedDeploy, IndexMark, deploy_key, mark_key
from cairn.launcher.state import StudyIndex
from cairn.names import is_name
from cairn.runtime.service import Runtime
from cairn.state.study import StudyState
from cairn.trust.connect import member_studies

log = logging.getLogger("cairn.launcher")

CATCH_UP_S = 10.0
"""The longest a launch waits for the index to read what its consumer has not handled yet."""


class Studies:
    """The studies of one site's launcher (see the module docstring)."""

    def __init__(self, rt: Runtime, site: str, deploys: KV[IndexedDeploy],
                 marks: KV[IndexMark], launched: Callable[[str], bool]) -> None:
        self.rt = rt
        self.site = site
        self._deploys = deploys
        self._marks = marks
        self._launched = launched
        self.indexes: dict[str, StudyIndex] = {}
        self._stored: dict[str, dict[str, IndexedDeploy]] = {}
        """Study -> the deploy commands in KV (what a restart starts from), by launch id."""
        self._stored_mark: dict[str, int] = {}
        self._marks_found: dict[str, IndexMark] = {}
        self._consuming: set[str] = set()
        self._lock = asyncio.Lock()

    # -- start ------------------------------------------------------------------------------

    def restore(self, stored: dict[str, IndexedDeploy], marks: dict[str, IndexMark]) -> None:
        """What the last run left in KV: deploy commands (by launch id) and marks (by study).
        Those whose launch id was used since are dropped when their study opens."""
        for launch_id, entry in stored.items():
            self._stored.setdefault(entry.deploy.study or "", {})[launch_id] = entry
        self._marks_found = dict(marks)
        self._stored_mark.update({study: mark.seq for study, mark in marks.items()})

    async def scan(self) -> None:
        """Open every study the site is in (in an insecure federation: every study)."""
        try:
            member = await member_studies(self.rt.bus, self.site, strict=True)
        except CairnError as exc:
            log.warning("cannot ask the authority for %s's studies yet: %s", self.site, exc)
            return
        names = member if member is not None else {
            s.removeprefix(subjects.STUDY_STREAM_PREFIX)
            for s in await self.rt.bus.stream_names(subjects.STUDY_STREAM_PREFIX)}
        for study in sorted(n for n in names if is_name(n)):
            try:
                await self._open(study)
            except CairnError as exc:
                log.warning("cannot open study %s yet: %s", study, exc)

    # -- membership -------------------------------------------------------------------------

    def is_member(self, study: str) -> bool:
        """Whether the site is in `study`, as its admin events said when last read."""
        index = self.indexes.get(study)
        return index is not None and index.has_site(self.site)

    async def ensure(self, study: str) -> bool:
        """Whether the site is in `study`, opening it first if it is not open yet.

        Raises:
            Unavailable: a secure federation's authority did not answer (try again).
        """
        if self.is_member(study):
            return True
        if not is_name(study):
            return False
        member = await member_studies(self.rt.bus, self.site, strict=True)
        if member is not None and study not in member:
            return False
        if member is None and subjects.study_stream(study).name not in \
                await self.rt.bus.stream_names(subjects.study_stream(study).name):
            return False
        if study in self.indexes:
            await self.catch_up(study)  # opened before, when the site was not in it
        await self._open(study)
        return self.is_member(study)

    async def recheck(self, study: str) -> bool | None:
        """Whether the site is in `study` now, asked afresh (the index may not have heard of
        a removal it may no longer read); None when that cannot be told."""
        try:
            member = await member_studies(self.rt.bus, self.site, strict=True)
            if member is not None:
                return study in member
            await self.catch_up(study)
        except CairnError as exc:
            log.warning("cannot tell whether %s is in study %s: %s", self.site, study, exc)
            return None
        return self.is_member(study)

    def study(self, study: str) -> StudyState | None:
        index = self.indexes.get(study)
        return index.study if index is not None else None

    # -- the deploy index -------------------------------------------------------------------

    async def deploy_for(self, study: str, launch_id: str) -> DeployCommand | None:
        """The deploy command of `launch_id`, not used before; None when there is none.

        Raises:
            Unavailable: the index could not read the study's stream in time.
        """
        found = self._lookup(study, launch_id)
        if found is None:
            # The agent had it before this launch came: it is stored, perhaps not indexed.
            await self.catch_up(study)
            found = self._lookup(study, launch_id)
        return found

    def forget(self, study: str, launch_id: str) -> None:
        """`launch_id` was used: its deploy command is never matched again."""
        if study in self.indexes:
            self.indexes[study] = state.without(self.indexes[study], launch_id)

    async def drop_stored(self, study: str, launch_id: str) -> None:
        """Delete a used deploy command from KV (its launch record now says it was used)."""
        if self._stored.get(study, {}).pop(launch_id, None) is not None:
            await self._deploys.delete(deploy_key(study, launch_id))

    def _lookup(self, study: str, launch_id: str) -> DeployCommand | None:
        index = self.indexes.get(study)
        entry = index.deploys.get(launch_id) if index is not None else None
        return entry.deploy if entry is not None else None

    async def catch_up(self, study: str) -> None:
        """Fold what the study's stream holds past the index's mark (usually nothing).

        Raises:
            Unavailable: it could not be read within `CATCH_UP_S`.
        """
        index = self.indexes.get(study)
        if index is None:
            return
        try:
            async with asyncio.timeout(CATCH_UP_S):
                async for item in replay(self.rt.bus, subjects.study_stream(study).name,
                                         STUDY_DECODER, filters=self._filters(study),
                                         start_seq=index.seq + 1):
                    if item.event is not None:
                        self._apply(study, item.seq, item.event)
        except TimeoutError:
            raise Unavailable(f"the deploy index of study {study} could not read its stream "
                              f"within {CATCH_UP_S:g}s") from None

    # -- the consumer -----------------------------------------------------------------------

    def _filters(self, study: str) -> list[str]:
        return [subjects.site_cmd(study, self.site, "deploy"),
                subjects.site_job_events(study, self.site, "rejected"),
                subjects.study_admin_all(study)]

    async def _open(self, study: str) -> None:
        """Start the study's index from what KV holds, read on to the stream's end, and
        consume it from then on if the site is in it."""
        async with self._lock:
            if study not in self.indexes:
                await self._restore_index(study)
        if self.is_member(study) and study not in self._consuming:
            self._consuming.add(study)
            try:
                await self.rt.consume(
                    stream=subjects.study_stream(study).name, durable=f"launcher-{self.site}",
                    filters=self._filters(study), decoder=STUDY_DECODER,
                    handler=lambda event, d: self._on_event(study, event, d))
            except BaseException:
                self._consuming.discard(study)  # the next open tries again
                raise

    async def _restore_index(self, study: str) -> None:
        stored = self._stored.get(study, {})
        for launch_id in [k for k in stored if self._launched(k)]:
            await self.drop_stored(study, launch_id)  # used before the last stop
        mark = self._marks_found.get(study)
        self.indexes[study] = StudyIndex(
            name=study, study=mark.study if mark else None, seq=mark.seq if mark else 0,
            deploys=dict(stored))
        await self.catch_up(study)

    def _apply(self, study: str, seq: int, event: object, *, again: bool = False) -> None:
        self.indexes[study] = state.apply(self.indexes[study], seq, event, site=self.site,
                                          launched=self._launched, again=again)

    async def _on_event(self, study: str, event: Event, d: Delivery) -> None:
        # Memory first (a launch waiting on it sees it now), then what a restart starts
        # from; a store that failed is retried on redelivery.
        self._apply(study, d.stream_seq, event, again=d.deliveries > 1)
        if isinstance(event, DeployCommand | DeploymentRejected):
            launch_id = worker_ref(event).launch_id
            stored = self._stored.setdefault(study, {})
            entry = self.indexes[study].deploys.get(launch_id)
            if entry is not None and launch_id not in stored:
                await self._deploys.put(deploy_key(study, launch_id), entry)
                stored[launch_id] = entry
            elif entry is None and launch_id in stored:
                await self.drop_stored(study, launch_id)
        if d.stream_seq > self._stored_mark.get(study, 0):
            # The study as it stands may be ahead of this message (a catch-up read on): a
            # restart then folds those admin events again, which leaves it as it is.
            await self._marks.put(mark_key(study), IndexMark(
                seq=d.stream_seq, study=self.indexes[study].study))
            self._stored_mark[study] = d.stream_seq
