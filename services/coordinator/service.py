"""The coordinator: owns studies, membership, jobs and their state machine, and dispatch.

State is a fold of the study streams (cairn.state); decisions (cairn.coordinator.decide) are
made after every event and on a tick, and are idempotent, so a restarted coordinator simply
folds, decides again, and carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

import msgspec

from cairn import api, subjects, telemetry
from cairn.bus import Bus, Delivery, Fence, decode_event, kv, replay, skipper
from cairn.coordinator.decide import Context, decide_job
from cairn.coordinator.eligibility import EvidenceBoard
from cairn.coordinator.live import LiveStudy
from cairn.coordinator.requests import Requests
from cairn.coordinator.retention import PayloadRetention, grace_option
from cairn.coordinator.sites import SiteBoard
from cairn.errors import CairnError
from cairn.events import (
    FEDERATION_DECODER,
    HEARTBEAT_DECODER,
    STUDY_DECODER,
    Event,
    FederationSeeded,
    FederationSite,
    FederationSiteAdded,
    FederationTerm,
    Heartbeat,
    JobSubmitted,
    StudyAdmin,
    StudyCreated,
    StudyHold,
    StudySiteAdded,
    StudyTerm,
    event_envelope,
    now,
    tag_of,
)
from cairn.names import is_name
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.spec.runtime import VALIDATION_STUDY
from cairn.state.study import StudyState
from cairn.state.view import StudyView

log = logging.getLogger("cairn.coordinator")
PUBLISHING_AT_ONCE = 32
"""Jobs whose decisions of one tick are published at the same time."""


class CoordinatorService:
    name: ClassVar[str] = "coordinator"

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        opts = config.options
        self.stale_s = float(opts.get("site_stale_s", max(3.0, 3 * config.heartbeat_s)))
        self.lost_s = float(opts.get("site_lost_s", 30.0))
        self.tick_s = float(opts.get("tick_s", 0.5))
        self.federation = ""
        self.hub = "hub"
        self.fed_sites: dict[str, str] = {}
        self.admins: dict[str, StudyAdmin] = {}
        self.studies: dict[str, LiveStudy] = {}
        self.applied: dict[str, int] = {}
        self.heartbeats: dict[str, tuple[Heartbeat, datetime]] = {}
        # Each live job's trace (the headers its submit came with): decisions made later,
        # on a tick or on another event, continue it, so a job is one trace.
        self.job_traces: dict[str, telemetry.TraceHeaders] = {}
        # Per live job, the ids of the decisions published (acknowledged) but maybe not yet
        # folded back: while the consumer lags, every tick and every event would make the
        # same decisions again and publish them again (the server drops the duplicates, but
        # each costs a round trip, and the lag grows with the load). Forgotten when the job
        # ends; empty after a restart, when deciding again is right.
        self.published: dict[str, set[str]] = {}
        self._lock = asyncio.Lock()
        self._tick_now = asyncio.Event()
        """Set by a change that may let queued jobs go (a released queue, a site added):
        the next tick runs at once, not up to `tick_s` later."""
        self._publishing = asyncio.Semaphore(PUBLISHING_AT_ONCE)
        self._applied = asyncio.Condition()
        self.started_at = datetime.now(UTC)
        self.evidence = EvidenceBoard(opts, verifier="coordinator")
        self.retention = PayloadRetention(grace_option(opts.get("payload_grace_s")))
        self._ready = False
        self.rt: Runtime | None = None
        self.fence: Fence | None = None

    @property
    def bus(self) -> Bus:
        assert self.rt is not None
        return self.rt.bus

    @property
    def views(self) -> dict[str, StudyView]:
        """Each study's view as it stands (what the pure fold of its stream gives)."""
        return {name: live.view for name, live in self.studies.items()}

    def ready(self) -> bool:
        return self._ready

    async def publish(self, event: Event) -> int:
        """Publish one of the coordinator's events, fenced by its lease: the event carries
        the lease's term, nothing is published once the lease is not valid, and JetStream
        stores it only while this coordinator's term is the last begun on its stream
        (`cairn.bus.Fence`).

        Raises:
            LeaseLost: this instance is not (or no longer) the active coordinator.
        """
        assert self.rt is not None
        headers = self.rt.fence(self.name)
        if self.fence is None:
            return await self.bus.publish(event, headers=headers)
        stream = (subjects.study_stream(event.study).name if event.study
                  else subjects.FEDERATION_STREAM.name)
        return await self.fence.publish(event, stream, headers=headers)

    def _term(self, stream: str) -> Event:
        """The event that begins this coordinator's term on `stream` (see `Fence`)."""
        assert self.fence is not None and self.rt is not None
        lease = self.fence.lease
        source = f"coordinator@{self.rt.site}"  # before the federation is read: its own site
        study = subjects.study_of_stream(stream)
        if study is None:
            return FederationTerm(**event_envelope(source, id=f"federation.term.{lease.term}"),
                                  service=self.name, term=lease.term, holder=lease.record.holder)
        return StudyTerm(**event_envelope(source, study=study,
                                          id=f"study.{study}.term.{lease.term}"),
                         service=self.name, term=lease.term, holder=lease.record.holder)

    async def _begin_term(self) -> None:
        """Begin this coordinator's term on every stream it wrote before, before folding
        any: from here on the server refuses whatever an earlier coordinator still sends."""
        assert self.fence is not None
        streams = [(subjects.FEDERATION_STREAM.name, f"{subjects.ROOT}.fed.>")]
        for stream in await self.bus.stream_names(subjects.STUDY_STREAM_PREFIX):
            study = subjects.study_of_stream(stream)
            if study is not None:
                streams.append((stream, subjects.study_all(study)))
        await asyncio.gather(*(self.fence.begin(stream, written) for stream, written in streams))

    def health(self) -> dict[str, Any]:
        return {"studies": len(self.views),
                "jobs": sum(len(v.jobs) for v in self.views.values())}

    # -- start: fold, then consume --------------------------------------------------------

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        lease = rt.leases.get(self.name)
        if lease is not None:
            self.fence = Fence(self.bus, lease, self._term)
            await self._begin_term()
        await self._load_federation()
        await self._seed()
        self.evidence.verifier = f"coordinator@{self.hub}"
        await self.evidence.start(rt)
        for stream in await rt.bus.stream_names(subjects.STUDY_STREAM_PREFIX):
            study = subjects.study_of_stream(stream)
            if study is not None:
                await self.open_study(study)
        await rt.consume(stream=subjects.FEDERATION_STREAM.name, durable="coordinator-fed",
                         filters=[f"{subjects.ROOT}.fed.>"],
                         decoder=FEDERATION_DECODER, handler=self._on_federation)
        await self._load_heartbeats()
        await rt.subscribe_core(subjects.heartbeat_all(), self._on_heartbeat)
        requests = Requests(self)
        await rt.serve_api(subjects.api_fed_all(), requests.handle)
        await rt.serve_api(subjects.api_study_all(), requests.handle)
        rt.spawn(self._ticker(), "coordinator-tick")
        rt.spawn(self.retention.run(self.bus, lambda: self.views), "coordinator-retention")
        self._ready = True
        log.info("coordinator ready: federation %s, hub %s, %d studies, %d jobs; a job's "
                 "payloads are deleted %gs after it ends", self.federation, self.hub,
                 len(self.views), sum(len(v.jobs) for v in self.views.values()),
                 self.retention.grace.total_seconds())

    async def _load_federation(self) -> None:
        async for item in replay(self.bus, subjects.FEDERATION_STREAM.name, FEDERATION_DECODER,
                                 filters=[f"{subjects.ROOT}.fed.>"]):
            if item.event is not None:
                self._apply_federation(item.event)

    def _apply_federation(self, event: object) -> None:
        match event:
            case FederationSeeded():
                self.federation, self.hub = event.federation, event.hub
                self.fed_sites = {s.name: s.org for s in event.sites}
                self.admins = {a.name: a for a in event.admins}
            case FederationSiteAdded():
                self.fed_sites[event.site.name] = event.site.org

    async def _seed(self) -> None:
        if self.federation or not self.config.federation:
            return
        from cairn.spec.federation import load_federation

        fed = load_federation(self.config.federation)
        admins = [msgspec.convert({"name": a.name, "org": a.org, "role": str(a.role)}, StudyAdmin)
                  for a in fed.admins]
        seeded = FederationSeeded(
            id=f"federation.{fed.federation}.seeded", at=now(), source=f"coordinator@{fed.hub}",
            federation=fed.federation, hub=fed.hub,
            sites=[FederationSite(name=s.name, org=s.org) for s in fed.sites], admins=admins)
        await self.publish(seeded)
        self._apply_federation(seeded)
        by_name = {a.name: a for a in admins}
        studies = {name: (list(m.sites), [by_name[a] for a in m.admins])
                   for name, m in fed.studies.items()}
        # The reserved study for recipe check jobs: every site, the project admins.
        studies.setdefault(VALIDATION_STUDY, ([s.name for s in fed.sites],
                                              [a for a in admins if a.role == "project_admin"]))
        for name, (sites, members) in studies.items():
            await self.open_study(name)
            if self.views[name].study is not None:
                continue
            await self.publish(StudyCreated(
                id=f"study.{name}.created", at=now(), source=f"coordinator@{self.hub}",
                study=name, name=name, sites=sites, admins=members))
        log.info("seeded federation %s from %s", fed.federation, self.config.federation)

    async def open_study(self, study: str) -> None:
        """Fold a study's stream and follow it (idempotent)."""
        if study in self.studies or not is_name(study):
            return
        assert self.rt is not None
        await self.bus.ensure_study(study)
        stream = subjects.study_stream(study).name
        live = LiveStudy()
        last = 0
        async for item in replay(self.bus, stream, STUDY_DECODER):
            last = item.seq
            if item.event is not None:
                live.apply(item.event)
                self._keep_trace(item.event, item.headers, live.view)
        self.studies[study] = live
        self.applied[stream] = last
        view = live.view
        await self.rt.consume(stream=stream, durable="coordinator",
                              filters=[subjects.study_all(study)], decoder=STUDY_DECODER,
                              handler=self._on_study_event)
        async with self._lock:
            for job in list(view.jobs.values()):
                await self._decide(study, job.job)

    # -- consuming ----------------------------------------------------------------------

    async def _on_study_event(self, event: Any, d: Delivery) -> None:
        study = event.study
        live = self.studies.get(study) if study else None
        if live is None:
            return
        if d.stream_seq <= self.applied.get(d.stream, 0):
            return  # folded already at start
        live.apply(event)
        self._keep_trace(event, d.headers, live.view)
        self.applied[d.stream] = d.stream_seq
        async with self._applied:
            self._applied.notify_all()
        if isinstance(event, StudySiteAdded) or (isinstance(event, StudyHold)
                                                 and not event.held):
            self._tick_now.set()
        job = getattr(event, "job", None)
        if isinstance(job, str):
            state = self.views[study].jobs.get(job)
            if state is not None and state.terminal:
                self.retention.job_ended(study, job, state.ended_at)
            async with self._lock:
                await self._decide(study, job)

    async def _on_federation(self, event: Any, d: Delivery) -> None:
        self._apply_federation(event)

    async def _on_heartbeat(self, msg: Any) -> None:
        # Checked against its subject: a site may speak for its own liveness only.
        hb = decode_event(HEARTBEAT_DECODER, msg)
        if hb is not None:
            self.heartbeats[hb.site] = (hb, datetime.now(UTC))

    async def _load_heartbeats(self) -> None:
        sites = await kv(self.bus, subjects.KV_SITES, Heartbeat,
                         on_undecodable=skipper(self.bus, service="coordinator"))
        async for name, hb in sites.items():
            if hb.site == name:  # the key is its writer's: a value about another is not
                self.heartbeats.setdefault(name, (hb, hb.at))

    async def wait_applied(self, study: str, seq: int, timeout: float = 5.0) -> None:
        """Wait until the study's view includes stream sequence `seq` (read-your-writes for
        the request that published it)."""
        stream = subjects.study_stream(study).name

        async def caught_up() -> None:
            async with self._applied:
                await self._applied.wait_for(lambda: self.applied.get(stream, 0) >= seq)

        try:
            await asyncio.wait_for(caught_up(), timeout)
        except TimeoutError:
            log.warning("view of %s did not reach seq %d within %.1fs", study, seq, timeout)

    # -- deciding -----------------------------------------------------------------------

    def context(self) -> Context:
        t = datetime.now(UTC)
        sites = SiteBoard(self.fed_sites, self.heartbeats, t, stale_s=self.stale_s,
                          lost_s=self.lost_s, since=self.started_at)
        return Context(now=t, hub=self.hub, sites=sites, evidence=self.evidence.view())

    def _keep_trace(self, event: object, headers: dict[str, str] | None,
                    view: StudyView) -> None:
        job_id = getattr(event, "job", None)
        if isinstance(event, JobSubmitted):
            self.job_traces[event.job] = telemetry.trace_headers(headers)
        elif isinstance(job_id, str) and job_id in self.job_traces:
            job = view.jobs.get(job_id)
            if job is not None and job.terminal:
                del self.job_traces[job_id]
        if isinstance(job_id, str) and job_id in self.published:
            ended = view.jobs.get(job_id)
            if ended is not None and ended.terminal:
                del self.published[job_id]

    async def _decide(self, study: str, job_id: str, ctx: Context | None = None) -> None:
        await self._publish_decided(study, job_id, await self._decisions(study, job_id, ctx))

    async def _decisions(self, study: str, job_id: str, ctx: Context | None) -> list[Event]:
        """What the job needs now that was not published (and acknowledged) already."""
        view = self.studies[study].view
        job = view.jobs.get(job_id)
        if job is None or job.terminal:
            return []
        if job.spec.requires is not None and job.state in ("submitted", "queued"):
            # A gated dispatch judges the freshest evidence and snapshots (eligibility.py).
            await self.evidence.catch_up(sorted(self.fed_sites), job.spec.requires.recipe)
            ctx = self.context()
        sent = self.published.setdefault(job_id, set())
        return [e for e in decide_job(job, view.study, ctx or self.context())
                if e.id not in sent]

    async def _publish_decided(self, study: str, job_id: str, decided: list[Event]) -> None:
        """Publish one job's decisions in order, each after the one before was stored."""
        if not decided:
            return
        sent = self.published.setdefault(job_id, set())
        with telemetry.continued(self.job_traces.get(job_id), "coordinator decide",
                                 **{"cairn.study": study, "cairn.job": job_id,
                                    "cairn.decision": ",".join(tag_of(e) for e in decided)}):
            for event in decided:
                try:
                    await self.publish(event)
                except CairnError as exc:
                    log.warning("could not publish %s: %s", event.id, exc)
                    return
                sent.add(event.id)

    async def _ticker(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick_now.wait(), self.tick_s)
            self._tick_now.clear()
            ctx = self.context()
            async with self._lock:
                # The jobs not ended only: the study's whole history grows without bound.
                # Decided in turn, then published up to PUBLISHING_AT_ONCE jobs at a time
                # (each job's events in order): a backlog that capacity just opened for is
                # dispatched at the rate the server stores, not one round trip per event.
                decided = [(study, job_id, events)
                           for study, live in list(self.studies.items())
                           for job_id in sorted(live.live)
                           if (events := await self._decisions(study, job_id, ctx))]
                await asyncio.gather(*(self._publish_bounded(*one) for one in decided))

    async def _publish_bounded(self, study: str, job_id: str, events: list[Event]) -> None:
        async with self._publishing:
            await self._publish_decided(study, job_id, events)

    # -- requests -----------------------------------------------------------------------

    async def stop(self) -> None:
        self._ready = False

    # -- views for requests ---------------------------------------------------------------

    def federation_info(self) -> api.FederationInfo:
        return api.FederationInfo(
            federation=self.federation, hub=self.hub, sites=tuple(sorted(self.fed_sites)),
            admins=tuple(self.admins.values()),
            studies=tuple(sorted(s for s, v in self.views.items() if v.study)))

    def site_infos(self, study: StudyState | None, only: str | None = None
                   ) -> list[api.SiteInfo]:
        ctx = self.context()
        names = list(study.sites) if study is not None else sorted(self.fed_sites)
        out = []
        for name in names:
            if only is not None and name != only:
                continue
            hb, seen = self.heartbeats.get(name, (None, None))
            status = ctx.sites.get(name)
            studies = tuple(hb.studies) if hb else ()
            if study is not None:
                studies = tuple(s for s in studies if s == study.name)
            out.append(api.SiteInfo(
                name=name, org=self.fed_sites.get(name, ""),
                online=bool(status and status.online), last_seen=seen,
                backend=hb.backend if hb else "", capacity=hb.capacity if hb else None,
                free=hb.free if hb else None, running=hb.running if hb else 0,
                studies=studies, hub=name == self.hub))
        return out
