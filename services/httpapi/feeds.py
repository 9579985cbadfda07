"""The API's read model: every study's stream folded as the services fold it, kept current.

A study is folded once, at its first mention, and then carried on from its last sequence:
a live message on the study's subjects wakes its feed, which replays what the stream holds
past that sequence (so nothing is missed, nothing counted twice, and a forgery is never
folded: `cairn.bus.replay` applies the owner check). What a page or an SSE stream shows is
this fold; who may see which study is decided per request (`cairn.httpapi.scope`).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from cairn import subjects
from cairn.bus import Bus, Replayed, replay
from cairn.client.timeline import entry
from cairn.events import STUDY_DECODER, WorkerMetric
from cairn.httpapi.models import MetricPoint, TimelineItem
from cairn.state import job as job_state
from cairn.state import study as study_state
from cairn.state.job import JobState
from cairn.state.study import StudyState

log = logging.getLogger("cairn.httpapi")

MAX_TIMELINE = 200_000
"""Entries kept per study (older ones are still in the stream: `cairn replay`)."""
SUBSCRIBER_QUEUE = 1024
"""Entries an SSE client may fall behind by before it is cut off (it reconnects with
`Last-Event-ID` and misses nothing)."""
RESYNC_S = 2.0
WAKE_RETRIES = 10
"""A feed replays at least this often, should a wake-up have been missed."""


@dataclass
class StudyFeed:
    """One study's fold: its state, its jobs, its timeline and its jobs' metrics."""

    name: str
    study: StudyState | None = None
    jobs: dict[str, JobState] = field(default_factory=dict)
    timeline: list[TimelineItem] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    """Job ids in the order they were submitted (the stream's): lists read it backwards."""
    by_job: dict[str, list[TimelineItem]] = field(default_factory=dict)
    """Each job's entries, in order (a job's timeline without a scan of the study's)."""
    metrics: dict[str, list[MetricPoint]] = field(default_factory=dict)
    last_seq: int = 0
    listeners: set[asyncio.Queue[TimelineItem | None]] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def apply(self, item: Replayed[Any]) -> TimelineItem:
        event = item.event
        if isinstance(event, study_state.StudyAdminEvents):
            self.study = study_state.apply(self.study, event) or self.study
        else:
            job_id = getattr(event, "job", None)
            if isinstance(job_id, str):
                updated = job_state.apply(self.jobs.get(job_id), event)
                if updated is not None:
                    if job_id not in self.jobs:
                        self.order.append(job_id)
                    self.jobs[job_id] = updated
            if isinstance(event, WorkerMetric):
                self.metrics.setdefault(event.job, []).append(MetricPoint(
                    seq=item.seq, at=event.at, site=event.site, role=event.role,
                    rank=event.rank, step=event.step, values=dict(event.values)))
        e = entry(item)
        shown = TimelineItem(seq=e.seq, at=e.at, subject=e.subject, type=e.type, job=e.job,
                             summary=e.summary)
        self.timeline.append(shown)
        if shown.job:
            self.by_job.setdefault(shown.job, []).append(shown)
        if len(self.timeline) > MAX_TIMELINE:
            cut = self.timeline[: len(self.timeline) - MAX_TIMELINE]
            del self.timeline[: len(cut)]
            for old in cut:
                kept = self.by_job.get(old.job or "")
                if kept and kept[0] is old:
                    kept.pop(0)
        self.last_seq = max(self.last_seq, item.seq)
        for queue in list(self.listeners):
            try:
                queue.put_nowait(shown)
            except asyncio.QueueFull:
                # Too slow a reader: end its stream; it resumes from its Last-Event-ID.
                self.listeners.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(None)
        return shown


class Feeds:
    """Every study's feed over one bus connection."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._feeds: dict[str, StudyFeed] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._subs: dict[str, object] = {}
        self._discover: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        """Fold every study there is now, then follow them and any new one."""
        for study in await self._studies():
            await self._wake_on(study)
            await self._follow(study).wait_synced()
        self._discover = asyncio.create_task(self._discovering(), name="feeds-discover")
        self.ready.set()

    async def _studies(self) -> list[str]:
        names = await self._bus.stream_names(subjects.STUDY_STREAM_PREFIX)
        return [s for n in names if (s := subjects.study_of_stream(n))]

    async def _discovering(self) -> None:
        """A study made since is found here (its stream), and then followed live."""
        while True:
            await asyncio.sleep(RESYNC_S)
            try:
                for study in await self._studies():
                    if study not in self._feeds:
                        self._follow(study)
                    await self._wake_on(study)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bus restarting: next time
                log.debug("feeds: %s", exc)

    async def _wake_on(self, study: str) -> None:
        """Live wake-ups for `study`: its own subjects, which the hub may subscribe to once
        the authority knows the study (a wider `cairn.study.>` it may not)."""
        if study in self._subs:
            return
        self._subs[study] = await self._bus.subscribe_core(
            f"{subjects.ROOT}.study.{study}.>", self._on_live)

    async def stop(self) -> None:
        if self._discover is not None:
            self._discover.cancel()
            await asyncio.gather(self._discover, return_exceptions=True)
        for sub in self._subs.values():
            with contextlib.suppress(Exception):
                await sub.unsubscribe()  # type: ignore[attr-defined]
        for task in self._tasks.values():
            task.cancel()
        for feed in self._feeds.values():
            for queue in list(feed.listeners):
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def names(self) -> list[str]:
        return sorted(n for n, f in self._feeds.items() if f.study is not None)

    def get(self, study: str) -> StudyFeed | None:
        feed = self._feeds.get(study)
        return feed if feed is not None and feed.study is not None else None

    async def _on_live(self, msg: object) -> None:
        subject = str(getattr(msg, "subject", ""))
        tokens = subject.split(".")
        if len(tokens) > 2:
            self._follow(tokens[2])

    def _follow(self, study: str) -> _Synced:
        try:
            subjects.study_stream(study)
        except Exception:
            return _Synced(None)
        if study not in self._feeds:
            self._feeds[study] = StudyFeed(name=study)
            self._wake[study] = asyncio.Event()
            synced = asyncio.Event()
            self._tasks[study] = asyncio.create_task(self._run(study, synced),
                                                     name=f"feed-{study}")
            return _Synced(synced)
        self._wake[study].set()
        return _Synced(None)

    async def _run(self, study: str, synced: asyncio.Event) -> None:
        feed = self._feeds[study]
        wake = self._wake[study]
        stream = subjects.study_stream(study).name
        while True:
            wake.clear()  # before syncing: a wake-up during the sync is not lost
            try:
                await self.sync(feed, stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a stream not made yet, a bus restarting: next time
                log.debug("feed %s: %s", study, exc)
            synced.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), RESYNC_S)

    async def sync(self, feed: StudyFeed, stream: str) -> int:
        """Fold what `stream` holds past the feed's last sequence; returns how many."""
        async with feed.lock:
            count = 0
            # A live message can arrive before the stream has stored it: look again, sooner
            # first, for up to about a second (then the periodic resync takes over).
            delay = 0.002
            for attempt in range(WAKE_RETRIES):
                async for item in replay(self._bus, stream, STUDY_DECODER,
                                         start_seq=feed.last_seq + 1):
                    feed.apply(item)
                    count += 1
                if count or attempt == WAKE_RETRIES - 1:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
            return count


class _Synced:
    def __init__(self, event: asyncio.Event | None) -> None:
        self._event = event

    async def wait_synced(self, timeout: float = 30.0) -> None:
        if self._event is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)


async def listen(feed: StudyFeed, after: int) -> AsyncIterator[TimelineItem]:
    """The study's entries past sequence `after`: those kept, then each new one; ends when
    the feed cuts this reader off (too slow) or stops."""
    queue: asyncio.Queue[TimelineItem | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
    feed.listeners.add(queue)
    try:
        last = after
        start = bisect.bisect_right(feed.timeline, after, key=lambda e: e.seq)
        for kept in feed.timeline[start:]:
            last = kept.seq
            yield kept
        while True:
            item = await queue.get()
            if item is None:
                return
            if item.seq > last:
                last = item.seq
                yield item
    finally:
        feed.listeners.discard(queue)
