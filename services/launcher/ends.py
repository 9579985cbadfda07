"""How each worker's end reaches its study (`worker.exited`), after a launcher restart too,
and what becomes of a launch whose end never can: its study is not (or no longer) this
site's, so the broker refuses the report. Such a launch is dead-lettered and reported once
(`cairn.launcher.unreportable`) and its record marked done; it never stops a start, and a
restart does not report it again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cairn import subjects
from cairn.bus import Delivery
from cairn.errors import CairnError, Unavailable
from cairn.events import LaunchRequested, WorkerExited, encode, now
from cairn.launcher import orphans
from cairn.launcher.backends.base import WorkerExit
from cairn.launcher.records import kv_key
from cairn.launcher.unreportable import dead_letter
from cairn.state import launch as launch_state
from cairn.state.launch import LaunchState
from cairn.subjects.table import kv_subject

if TYPE_CHECKING:
    from cairn.launcher.service import LauncherService

log = logging.getLogger("cairn.launcher")


class WorkerEnds:
    """Reports of a launcher's workers; state lives in the service, these publish and record
    through it."""

    def __init__(self, service: LauncherService) -> None:
        self.svc = service

    async def reconcile(self) -> None:
        assert self.svc.backend is not None
        for launch in self.svc.launches.live():
            record = self.svc.records[launch.launch_id]
            if not await self._reportable(record.study):
                await self.unreportable(
                    launch, f"study {record.study!r} is not one of site {self.svc.site}'s studies")
                continue
            if record.handle is None:
                await self._unrecorded(launch)
                continue
            found = await self.svc.backend.reattach(record.handle)
            if isinstance(found, WorkerExit):
                log.info("worker %s ended while the launcher was down", record.launch_id)
                await self.report_or_later(launch, found)
            else:
                log.info("reattached to worker %s", record.launch_id)
                await orphans.adopt_or_stop(self.svc, launch, found, recorded=True)

    async def _unrecorded(self, launch: LaunchState) -> None:
        """A launch whose record has no handle: the launcher stopped between writing it and
        recording what the backend started, which may have been submitted all the same."""
        assert self.svc.backend is not None
        found = await orphans.find(self.svc.backend, launch.launch_id)
        if found is None:
            await self.report_or_later(launch, WorkerExit(
                launch_id=launch.launch_id, exit_code=None, cause="infrastructure",
                message="the launcher stopped while starting this worker", ended_at=now()))
            return
        log.warning("found worker %s (%s), which the launcher had not recorded",
                    launch.launch_id, found.native_id)
        attached = await self.svc.backend.reattach(found)
        if isinstance(attached, WorkerExit):
            await self.svc.remember(launch.launch_id, found)
            await self.report_or_later(launch, orphans.unrecorded_exit(attached))
            return
        await orphans.adopt_or_stop(self.svc, launch, attached, recorded=False)

    async def _reportable(self, study: str) -> bool:
        """Whether this site may report in `study`; True while that cannot be told (an
        authority that does not answer), so nothing is dead-lettered on a guess."""
        try:
            return await self.svc.studies.ensure(study)
        except CairnError as exc:
            log.warning("cannot tell yet whether %s is in study %s: %s", self.svc.site, study,
                        exc)
            return True

    async def report(self, launch: LaunchState, result: WorkerExit, *,
                     timeout: float = 30.0) -> None:
        """Publish how the worker ended, then record it; one that can never be reported (the
        site is not, or no longer, in its study) is dead-lettered instead.

        Raises:
            CairnError: it could not be published, and may be later.
        """
        # The latest state: a cancel may have arrived while the worker ran.
        launch = self.svc.launches.get(launch.launch_id) or launch
        cause = launch_state.exit_cause(launch, result.exit_code, result.cause)
        exited = WorkerExited(**self.svc.event_base(launch, "exited"),
                              exit_code=result.exit_code, reason=cause,
                              message=launch_state.exit_message(cause, result.message))
        # Published before it is recorded: a launcher killed in between reports it again on
        # restart (the same message id), rather than never.
        try:
            await self.svc.bus.publish(exited, timeout=timeout)
        except CairnError as exc:
            if await self.svc.studies.recheck(launch.study) is not False:
                raise
            await self.unreportable(launch, f"its report was refused: site {self.svc.site} "
                                            f"is no longer in study {launch.study} ({exc})",
                                    result)
            return
        await self.svc.record(exited, exit=result)

    async def report_or_later(self, launch: LaunchState, result: WorkerExit) -> None:
        """Report now, or keep trying in the background: a report never stops a start."""
        try:
            await self.report(launch, result, timeout=5.0)
            return
        except CairnError as exc:
            log.warning("could not report the end of %s yet (%s); retrying in the background",
                        launch.launch_id, exc)
        assert self.svc.rt is not None
        self.svc.rt.spawn(self._report_until_done(launch, result), f"report:{launch.launch_id}")

    async def _report_until_done(self, launch: LaunchState, result: WorkerExit) -> None:
        for attempt in range(20):  # each waits up to 30 s: about 10 minutes in all
            try:
                await self.report(launch, result)
                return
            except CairnError as exc:
                log.warning("report of %s failed (attempt %d): %s", launch.launch_id,
                            attempt + 1, exc)
        log.error("gave up reporting the end of %s; the next start tries again",
                  launch.launch_id)

    async def unreportable(self, launch: LaunchState, why: str,
                           result: WorkerExit | None = None) -> None:
        """Dead-letter a launch record whose end can never be reported, and mark it done, so
        it is reported once: a restart starts past it."""
        record = self.svc.records[launch.launch_id]
        key = kv_key(launch.launch_id)
        bucket = subjects.kv_launches(self.svc.site)
        if not await dead_letter(self.svc.bus, site=self.svc.site, store=f"KV_{bucket}",
                                 subject=kv_subject(bucket, key), key=key, seq=0,
                                 data=encode(record), headers=None, why=why):
            return  # the next start tries again
        if result is None and record.handle is not None and self.svc.backend is not None:
            found = await self.svc.backend.reattach(record.handle)
            if not isinstance(found, WorkerExit):
                # It can report nothing and nobody would hear of its end: stop it.
                assert self.svc.rt is not None
                self.svc.rt.spawn(self.svc.backend.cancel(found, 10.0),
                                  f"cancel:{launch.launch_id}")
        result = result or WorkerExit(launch_id=launch.launch_id, exit_code=None,
                                      cause="launch-failed", message=why, ended_at=now())
        exited = WorkerExited(**self.svc.event_base(launch, "exited"),
                              exit_code=result.exit_code, reason=result.cause, message=why)
        await self.svc.record(exited, exit=result, dead_lettered=why)

    async def dead_letter_request(self, req: LaunchRequested, d: Delivery, why: str) -> None:
        try:
            _, headers, data = await self.svc.bus.get_message(d.stream, d.stream_seq)
        except CairnError:
            headers, data = d.headers, encode(req)
        if not await dead_letter(self.svc.bus, site=self.svc.site, store=d.stream,
                                 subject=d.subject, key=req.launch_id, seq=d.stream_seq,
                                 data=data, headers=headers, why=why):
            raise Unavailable(f"could not dead-letter the launch request {req.launch_id}")
