"""The site agent: checks each deployment against the site's policy, owns allocations, and
heartbeats with capacity. It hands the launcher secret *references* only.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any, ClassVar

from cairn import subjects
from cairn.agent.policy_file import RuntimeFile
from cairn.bus import Delivery, kv, replay
from cairn.errors import CairnError
from cairn.events import (
    STUDY_DECODER,
    CancelCommand,
    DatasetMount,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    Heartbeat,
    LaunchCancel,
    LaunchRequested,
    Resources,
    SiteConfigLoaded,
    SiteConfigRejected,
    WorkerExited,
    now,
    stamp,
)
from cairn.names import is_name
from cairn.runtime.service import Runtime
from cairn.spec.policy import StudyUsage, check_deployment
from cairn.spec.resources import ResourceRequest
from cairn.spec.site import SiteConfig, load_site_config

log = logging.getLogger("cairn.agent")


class Allocation:
    __slots__ = ("gpus", "job", "launch_id", "resources", "study")

    def __init__(self, launch_id: str, study: str, job: str, resources: Resources,
                 gpus: list[str]) -> None:
        self.launch_id, self.study, self.job = launch_id, study, job
        self.resources, self.gpus = resources, gpus


def launch_id_of(job: str, site: str, role: str, rank: int, attempt: int) -> str:
    return f"{job}/{site}/{role}/{rank}/{attempt}"


class AgentService:
    name: ClassVar[str] = "agent"

    def __init__(self, config: Any) -> None:
        if not config.site_config:
            raise CairnError("the agent needs --site-config (site.yaml)")
        self.config = config
        self.site_cfg: SiteConfig = load_site_config(config.site_config)
        self.site = self.site_cfg.site
        self.runtime_file = RuntimeFile(self.site_cfg.runtime)
        self.allocations: dict[str, Allocation] = {}
        self.decided: set[str] = set()
        self.studies: set[str] = set()
        self.started_at = datetime.now(UTC)
        self.seq = 0
        self._lock = asyncio.Lock()
        self._rescan = asyncio.Event()
        self._ready = False
        self.rt: Runtime | None = None

    @property
    def bus(self) -> Any:
        assert self.rt is not None
        return self.rt.bus

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        return {"allocations": len(self.allocations), "runtime_error": self.runtime_file.error}

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        rt.site = self.site
        await rt.bus.ensure_site(self.site)
        await self._check_runtime_file()
        self._sites_kv = await kv(rt.bus, subjects.KV_SITES, Heartbeat)
        await self._scan_studies()
        await rt.subscribe_core(subjects.study_admin_all(), self._on_admin)
        await self._heartbeat()
        rt.spawn(self._heartbeats(), "agent-heartbeat")
        rt.spawn(self._watch(), "agent-watch")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False

    # -- studies --------------------------------------------------------------------------

    async def _on_admin(self, msg: Any) -> None:
        self._rescan.set()

    async def _scan_studies(self) -> None:
        for stream in await self.bus.stream_names("STUDY_"):
            study = stream.removeprefix("STUDY_")
            if study not in self.studies and is_name(study):
                await self._open_study(study)

    async def _open_study(self, study: str) -> None:
        assert self.rt is not None
        self.studies.add(study)
        stream = subjects.study_stream(study).name
        async for item in replay(self.bus, stream, STUDY_DECODER,
                                 filters=[subjects.site_job_events(study, self.site)]):
            self._fold(item.event)
        await self.rt.consume(
            stream=stream, durable=f"agent-{self.site}",
            filters=[subjects.site_cmds(study, self.site),
                     subjects.site_job_events(study, self.site, "exited")],
            decoder=STUDY_DECODER, handler=self._on_event)

    def _fold(self, event: Any) -> None:
        match event:
            case DeploymentAccepted():
                self.decided.add(event.launch_id)
                self.allocations[event.launch_id] = Allocation(
                    event.launch_id, event.study or "", event.job, event.resources,
                    list(event.gpus))
            case DeploymentRejected():
                self.decided.add(launch_id_of(event.job, event.site, event.role, event.rank,
                                              event.attempt))
            case WorkerExited():
                self.decided.add(event.launch_id)
                self.allocations.pop(event.launch_id, None)

    # -- commands -------------------------------------------------------------------------

    async def _on_event(self, event: Any, d: Delivery) -> None:
        async with self._lock:
            match event:
                case DeployCommand():
                    await self._deploy(event)
                case CancelCommand():
                    await self._cancel(event)
                case WorkerExited():
                    self._fold(event)

    def _usage(self, study: str) -> StudyUsage:
        total = ResourceRequest()
        jobs = set()
        for a in self.allocations.values():
            if a.study == study:
                total = total + _request(a.resources)
                jobs.add(a.job)
        return StudyUsage(resources=total, jobs=frozenset(jobs))

    def free(self) -> Resources:
        inv = self.site_cfg.inventory
        used = Resources(gpus=0, millicpus=0, memory_bytes=0)
        for a in self.allocations.values():
            used = Resources(gpus=used.gpus + a.resources.gpus,
                             millicpus=used.millicpus + a.resources.millicpus,
                             memory_bytes=used.memory_bytes + a.resources.memory_bytes)
        return Resources(gpus=inv.gpus - used.gpus, millicpus=inv.millicpus - used.millicpus,
                         memory_bytes=inv.memory_bytes - used.memory_bytes)

    def _gpu_ids(self) -> list[str]:
        ids = list(self.site_cfg.gpu_ids) or [str(i) for i in range(self.site_cfg.inventory.gpus)]
        taken = {g for a in self.allocations.values() for g in a.gpus}
        return [g for g in ids if g not in taken]

    async def _deploy(self, cmd: DeployCommand) -> None:
        study = cmd.study or ""
        launch_id = launch_id_of(cmd.job, self.site, cmd.role, cmd.rank, cmd.attempt)
        if launch_id in self.decided:
            return  # decided before (redelivery or replay): never twice
        runtime = self.runtime_file.current
        decision = check_deployment(self.site_cfg.runtime, runtime, study,
                                    _request(cmd.resources), cmd.image, self._usage(study),
                                    job=cmd.job)
        reason, message = (None, "")
        if not decision.accepted:
            reason, message = str(decision.cause), decision.message
        else:
            free = self.free()
            want = cmd.resources
            if (want.gpus > free.gpus or want.millicpus > free.millicpus
                    or want.memory_bytes > free.memory_bytes):
                reason = "infrastructure"
                message = (f"site {self.site} is full: asked {_describe(want)}, "
                           f"free {_describe(free)}")
        base = {"at": now(), "source": f"agent@{self.site}", "study": study,
                "actor": cmd.actor, "cause": cmd.id}
        if reason is not None:
            self.decided.add(launch_id)
            await self.bus.publish(DeploymentRejected(
                id=f"{launch_id}.rejected", **base, job=cmd.job, site=self.site,  # type: ignore[arg-type]
                role=cmd.role, rank=cmd.rank, attempt=cmd.attempt, reason=reason,
                message=message))
            return
        assert runtime is not None
        policy = runtime.studies[study]
        gpus = self._gpu_ids()[:cmd.resources.gpus]
        accepted = DeploymentAccepted(
            id=f"{launch_id}.accepted", **base, job=cmd.job, site=self.site,  # type: ignore[arg-type]
            role=cmd.role, rank=cmd.rank, attempt=cmd.attempt, launch_id=launch_id,
            gpus=gpus, resources=cmd.resources)
        self._fold(accepted)
        await self.bus.publish(accepted)
        platform: dict[str, Any] = {}
        for key in ("docker", "kubernetes", "slurm"):
            value = getattr(policy, key, None)
            if value is not None:
                platform[key] = value
        request = LaunchRequested(
            id=f"{launch_id}.launch", **base, launch_id=launch_id, job=cmd.job,  # type: ignore[arg-type]
            site=self.site, role=cmd.role, rank=cmd.rank, attempt=cmd.attempt,
            entrypoint=cmd.entrypoint, resources=cmd.resources, gpus=gpus,
            image=cmd.image or policy.images.default, code_digest=cmd.code_digest,
            params=cmd.params, env=dict(policy.env),
            secret_refs={k: v.source for k, v in policy.secret_env.items()},
            datasets={k: DatasetMount(source=v.source, mode=v.mode)
                      for k, v in policy.datasets.items()},
            timeout_s=cmd.timeout_s, platform=platform)
        await self.bus.publish(request)

    async def _cancel(self, cmd: CancelCommand) -> None:
        for a in list(self.allocations.values()):
            if a.job == cmd.job:
                await self.bus.publish(LaunchCancel(
                    id=f"{a.launch_id}.cancel", at=now(), source=f"agent@{self.site}",
                    study=a.study, actor=cmd.actor, cause=cmd.id, launch_id=a.launch_id,
                    job=a.job, site=self.site, reason=cmd.reason, grace_s=cmd.grace_s))

    # -- loops ----------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        self.seq += 1
        runtime = self.runtime_file.current
        hb = Heartbeat(**stamp(), source=f"agent@{self.site}", site=self.site, seq=self.seq,
                       backend=self.site_cfg.backend,
                       capacity=_resources(self.site_cfg.inventory), free=self.free(),
                       running=len(self.allocations),
                       studies=sorted(runtime.studies) if runtime else [],
                       started_at=self.started_at)
        from cairn.events import encode

        await self.bus.publish_core(subjects.heartbeat(self.site), encode(hb))
        try:
            await self._sites_kv.put(self.site, hb)
        except Exception as exc:
            log.debug("heartbeat KV put failed: %s", exc)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            try:
                await self._heartbeat()
            except Exception as exc:
                log.debug("heartbeat failed: %s", exc)

    async def _check_runtime_file(self) -> None:
        changed, error = self.runtime_file.poll()
        if not changed:
            return
        file = str(self.runtime_file.path)
        try:
            if error is not None:
                await self.bus.publish(SiteConfigRejected(
                    **stamp(), source=f"agent@{self.site}", site=self.site, file=file,
                    error=error))
            else:
                runtime = self.runtime_file.current
                await self.bus.publish(SiteConfigLoaded(
                    **stamp(), source=f"agent@{self.site}", site=self.site, file=file,
                    studies=sorted(runtime.studies) if runtime else []))
        except CairnError as exc:
            log.warning("could not report the runtime file: %s", exc)

    async def _watch(self) -> None:
        while True:
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow the cancel
                # that stops this loop when the event fires at the same moment.
                async with asyncio.timeout(1.0):
                    await self._rescan.wait()
            except TimeoutError:
                pass
            self._rescan.clear()
            try:
                await self._check_runtime_file()
                await self._scan_studies()
            except Exception as exc:
                log.debug("watch failed: %s", exc)


def _request(r: Resources) -> ResourceRequest:
    return ResourceRequest(gpus=r.gpus, millicpus=r.millicpus, memory_bytes=r.memory_bytes)


def _resources(r: ResourceRequest) -> Resources:
    return Resources(gpus=r.gpus, millicpus=r.millicpus, memory_bytes=r.memory_bytes)


def _describe(r: Resources) -> str:
    return f"{r.gpus} gpus, {r.millicpus / 1000:g} cpus, {r.memory_bytes >> 20}Mi"
