"""A study's stored history through a client: its events as timeline entries (tailed and
followed), and its state folded with the reducers the services use."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from cairn import subjects
from cairn.bus import Bus, replay
from cairn.client.timeline import TimelineEntry, entry
from cairn.errors import NotFound, PermissionDenied, Unavailable
from cairn.events import STUDY_DECODER
from cairn.state.view import StudyView, fold

log = logging.getLogger("cairn.client")
FOLLOW_OUTAGE_S = 30.0
"""How long a followed stream may stay unreadable before following ends with the error."""


async def study_events(bus: Bus, study: str, *, tail: int | None, follow: bool, poll: float,
                       job: str | None, timeout: float | None) -> AsyncIterator[TimelineEntry]:
    """The last `tail` events (all when None), then, with `follow`, new ones as they are
    stored (until `timeout`, if given)."""
    stream = subjects.study_stream(study).name
    filters = [subjects.job_all(study, job)] if job else []
    backlog = [entry(r) async for r in replay(bus, stream, STUDY_DECODER, filters=filters)]
    if tail is not None:
        backlog = backlog[-tail:] if tail > 0 else []
    last = max((e.seq for e in backlog), default=0)
    for e in backlog:
        yield e
    deadline = None if timeout is None else time.monotonic() + timeout
    failing_since: float | None = None
    while follow and (deadline is None or time.monotonic() < deadline):
        await asyncio.sleep(poll)
        # Repeated bounded replays from the last seen sequence: each one ends where the
        # stream ends, so nothing is missed and nothing is yielded twice.
        try:
            async for r in replay(bus, stream, STUDY_DECODER, filters=filters,
                                  start_seq=last + 1):
                last = max(last, r.seq)
                yield entry(r)
            failing_since = None
        except (Unavailable, PermissionDenied) as exc:
            # The same read worked a moment ago: a cluster electing the stream's new leader
            # after a server died answers nothing for a few seconds (and a consumer create
            # that gets no answer reads as a refusal). Read on from `last`, so nothing is
            # missed or repeated; give up only on an outage that lasts.
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since >= FOLLOW_OUTAGE_S or bus.nc.is_closed:
                raise  # an outage that lasts, or a connection closed for good: no use
            log.info("follow %s: %s; reading on", stream, exc)


async def study_replay(bus: Bus, study: str, job: str | None
                       ) -> tuple[StudyView, list[TimelineEntry]]:
    """Fold the study's stream (or one job's subjects): the state and the timeline."""
    stream = subjects.study_stream(study).name
    filters = [subjects.job_all(study, job)] if job else []
    items = [r async for r in replay(bus, stream, STUDY_DECODER, filters=filters)]
    view = fold(r.event for r in items if r.event is not None)
    if job is not None and job not in view.jobs:
        raise NotFound(f"job {job} has no events in {stream}")
    return view, [entry(r) for r in items]
