"""A job's data-plane payloads live until the job has ended and a grace has passed; then the
coordinator deletes them, and keeps the job's results.

Why here, and not a TTL: how long a payload must live is known only when its job ends, which
the coordinator is the one to see (its own `job.completed|failed|aborted`); a per-message TTL
or a stream's max-age is fixed when the payload is written, so it would either cut a long job
short or keep a short job's payloads for the longest job's sake. Payloads sit under their
own subject token (`cairn.files.<study>.<job>.p.>`), apart from results
(`cairn.files.<study>.<job>.<digest>.*`), so one purge of that filter removes exactly them.

After a restart nothing is forgotten: the coordinator asks each study's `FILES_<study>` which
jobs still have payloads (one request per study) and schedules those of ended jobs again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from cairn import subjects
from cairn.bus import Bus
from cairn.bus._objects import PAYLOADS_TOKEN
from cairn.errors import InvalidInput
from cairn.state.view import StudyView

log = logging.getLogger("cairn.coordinator.retention")

DEFAULT_GRACE_S = 3600.0
"""How long a job's payloads outlive it (`-O payload_grace_s=`): time to look into a job
that went wrong, while a model sent every round does not pile up."""
_SWEEP_S = 1.0


def payloads_filter(study: str, job: str) -> str:
    return f"{subjects.files_prefix(study, job)}.{PAYLOADS_TOKEN}.>"


def grace_option(raw: str | None) -> float:
    """`-O payload_grace_s=`'s value in seconds (the default when not given).

    Raises:
        InvalidInput: not a number of seconds, or negative.
    """
    if raw is None or raw == "":
        return DEFAULT_GRACE_S
    try:
        grace = float(raw)
    except ValueError:
        grace = -1.0
    if not grace >= 0 or grace == float("inf"):
        raise InvalidInput(f"payload_grace_s: {raw!r} is not a number of seconds (0 or more)",
                           field="payload_grace_s")
    return grace


class PayloadRetention:
    """Deletes each ended job's payloads `grace_s` after it ended."""

    def __init__(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.grace = timedelta(seconds=max(0.0, grace_s))
        self.due: dict[tuple[str, str], datetime] = {}
        self.deleted = 0

    def job_ended(self, study: str, job: str, ended_at: datetime | None) -> None:
        self.due.setdefault((study, job), (ended_at or datetime.now(UTC)) + self.grace)

    async def recover(self, bus: Bus, views: Mapping[str, StudyView]) -> None:
        """Schedule again the ended jobs whose payloads are still stored."""
        for study, view in views.items():
            left = await _jobs_with_payloads(bus, study)
            for job_id in left:
                job = view.jobs.get(job_id)
                if job is not None and job.terminal:
                    self.job_ended(study, job_id, job.ended_at)

    async def run(self, bus: Bus, views: Callable[[], Mapping[str, StudyView]]) -> None:
        await self.recover(bus, views())
        while True:
            now = datetime.now(UTC)
            for key, at in sorted(self.due.items(), key=lambda item: item[1]):
                if at > now:
                    break
                if await self._delete(bus, *key):
                    del self.due[key]
            await asyncio.sleep(_SWEEP_S)

    async def _delete(self, bus: Bus, study: str, job: str) -> bool:
        """Whether the job's payloads are gone (False: try again on the next sweep)."""
        stream = subjects.files_stream(study).name
        try:
            await bus.js.purge_stream(stream, subject=payloads_filter(study, job))
        except Exception as exc:
            if type(exc).__name__ == "NotFoundError":
                return True  # no such stream: nothing was ever stored
            log.warning("could not delete the payloads of %s/%s yet: %s", study, job, exc)
            return False
        self.deleted += 1
        log.info("deleted the payloads of job %s/%s (ended, grace %ss passed)", study, job,
                 int(self.grace.total_seconds()))
        return True


async def _jobs_with_payloads(bus: Bus, study: str) -> set[str]:
    stream = subjects.files_stream(study).name
    try:
        info = await bus.js.stream_info(
            stream, subjects_filter=f"{subjects.files_all(study)[:-2]}.*.{PAYLOADS_TOKEN}.>")
    except Exception:
        return set()  # no such stream: no payloads
    found = info.state.subjects or {}
    depth = len(subjects.files_all(study).split(".")) - 1  # the job token's index
    return {s.split(".")[depth] for s in found}
