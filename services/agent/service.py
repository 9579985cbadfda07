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
from cairn.bus import Bus, Delivery, decode_event, kv, replay
from cairn.errors import CairnError
from cairn.events import (
    FEDERATION_DECODER,
    STUDY_DECODER,
    BackendDeclared,
    CancelCommand,
    DatasetMount,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    EventEnvelope,
    Heartbeat,
    LaunchCancel,
    LaunchRequested,
    Resources,
    SiteConfigLoaded,
    SiteConfigRejected,
    WorkerExited,
    event_envelope,
    now,
    stamp,
    worker_ref,
)
from cairn.names import is_name
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.spec.privacy import effective as effective_privacy
from cairn.spec.site import SiteConfig, load_site_config
from cairn.state import agent as agent_state
from cairn.state.agent import AgentState
from cairn.trust.connect import member_studies
from cairn.trust.launchguard import platform_settings

log = logging.getLogger("cairn.agent")

# How long a deploy waits for the site's launcher to declare its backend on a site's very
# first start (later starts know it from the FEDERATION stream); past it the launcher checks.
BACKEND_WAIT_S = 10.0


class AgentService:
    name: ClassVar[str] = "agent"

    def __init__(self, config: ServiceConfig) -> None:
        if not config.site_config:
            raise CairnError("the agent needs --site-config (site.yaml)")
        self.config = config
        self.site_cfg: SiteConfig = load_site_config(config.site_config)
        self.site = self.site_cfg.site
        self.runtime_file = RuntimeFile(self.site_cfg.runtime)
        self.state = AgentState()
        self.backend: BackendDeclared | None = None
        self._backend_known = asyncio.Event()
        self.studies: set[str] = set()
        self.started_at = datetime.now(UTC)
        self.seq = 0
        self._lock = asyncio.Lock()
        self._rescan = asyncio.Event()
        self._ready = False
        self.rt: Runtime | None = None

    @property
    def bus(self) -> Bus:
        assert self.rt is not None
        return self.rt.bus

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        return {"allocations": len(self.state.allocations),
                "runtime_error": self.runtime_file.error}

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        rt.site = self.site
        await rt.bus.ensure_site(self.site)
        await self._check_runtime_file()
        self._sites_kv = await kv(rt.bus, subjects.KV_SITES, Heartbeat)
        await self._learn_backend()
        await self._scan_studies()
        # Joining a study changes this site's rights: the authority has it reconnect, and a
        # reconnect is the moment to look for new studies (it may read no others).
        rt.bus.reconnect_listeners.append(self._rescan.set)
        await self._heartbeat()
        rt.spawn(self._heartbeats(), "agent-heartbeat")
        rt.spawn(self._watch(), "agent-watch")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False

    # -- the launcher's backend -------------------------------------------------------------

    async def _learn_backend(self) -> None:
        assert self.rt is not None
        subject = subjects.site_event(self.site, "backend")
        await self.rt.subscribe_core(subject, self._on_backend)
        try:
            async for item in replay(self.bus, subjects.FEDERATION_STREAM.name,
                                     FEDERATION_DECODER, filters=[subject]):
                if isinstance(item.event, BackendDeclared):
                    self._declared(item.event)
        except CairnError as exc:
            # FEDERATION is not there yet (a federation's first start): the launcher's
            # declaration arrives on the subscription above instead.
            log.info("no past backend declaration of %s: %s", self.site, exc)

    async def _on_backend(self, msg: Any) -> None:
        event = decode_event(FEDERATION_DECODER, msg)  # garbage or a forgery: None
        if isinstance(event, BackendDeclared):
            self._declared(event)

    def _declared(self, event: BackendDeclared) -> None:
        if event.site == self.site:
            self.backend = event
            self._backend_known.set()

    async def _capabilities(self) -> tuple[str, frozenset[str]] | None:
        if not self._backend_known.is_set():
            try:
                async with asyncio.timeout(BACKEND_WAIT_S):
                    await self._backend_known.wait()
            except TimeoutError:
                log.warning("the launcher of %s has not declared its backend", self.site)
                return None
        assert self.backend is not None
        return self.backend.backend, frozenset(self.backend.capabilities)

    # -- studies --------------------------------------------------------------------------

    async def _scan_studies(self) -> None:
        # In a secure federation the broker lets a site read only its own studies, and not
        # even list the others' names: the authority says which are its own.
        member = await member_studies(self.bus, self.site)
        if member is None:
            names = [s.removeprefix(subjects.STUDY_STREAM_PREFIX)
                     for s in await self.bus.stream_names(subjects.STUDY_STREAM_PREFIX)]
        else:
            names = sorted(member)
        for study in names:
            if study not in self.studies and is_name(study):
                try:
                    await self._open_study(study)
                except Exception as exc:  # try again on the next scan
                    self.studies.discard(study)
                    log.warning("cannot open study %s yet: %s", study, exc)

    async def _open_study(self, study: str) -> None:
        assert self.rt is not None
        self.studies.add(study)
        stream = subjects.study_stream(study).name
        async for item in replay(self.bus, stream, STUDY_DECODER,
                                 filters=[subjects.site_job_events(study, self.site)]):
            self.state = agent_state.apply(self.state, item.event)
        await self.rt.consume(
            stream=stream, durable=f"agent-{self.site}",
            filters=[subjects.site_cmds(study, self.site),
                     subjects.site_job_events(study, self.site, "exited")],
            decoder=STUDY_DECODER, handler=self._on_event)

    # -- commands -------------------------------------------------------------------------

    async def _on_event(self, event: Any, d: Delivery) -> None:
        async with self._lock:
            match event:
                case DeployCommand():
                    await self._deploy(event)
                case CancelCommand():
                    await self._cancel(event)
                case WorkerExited():
                    self.state = agent_state.apply(self.state, event)

    def free(self) -> Resources:
        return self.state.free(self.site_cfg.inventory)

    def _gpu_ids_all(self) -> list[str]:
        return list(self.site_cfg.gpu_ids) or [str(i)
                                               for i in range(self.site_cfg.inventory.gpus)]

    async def _deploy(self, cmd: DeployCommand) -> None:
        if worker_ref(cmd).launch_id in self.state.decided:
            return  # decided before (redelivery, replay, a fresh copy): never twice
        runtime = self.runtime_file.current
        verdict = agent_state.decide(
            self.state, cmd, policy_file=self.site_cfg.runtime, runtime=runtime,
            inventory=self.site_cfg.inventory, gpu_ids=self._gpu_ids_all(),
            backend=await self._capabilities())
        if verdict is None:
            return
        # The command was checked against its subject: its site is this one.
        study, ref, at = cmd.study or "", worker_ref(cmd), now()

        def answer(what: str) -> EventEnvelope:
            return event_envelope(f"agent@{self.site}", id=f"{ref.launch_id}.{what}", at=at,
                            study=study, actor=cmd.actor, cause=cmd.id)

        if verdict.reason is not None:
            rejected = DeploymentRejected(
                **answer("rejected"), **ref.fields(), reason=verdict.reason,
                message=verdict.message, missing_capability=verdict.missing_capability)
            self.state = agent_state.apply(self.state, rejected)
            await self.bus.publish(rejected)
            return
        assert runtime is not None
        policy = runtime.studies[study]
        gpus = list(verdict.gpus)
        accepted = DeploymentAccepted(
            **answer("accepted"), **ref.fields(), launch_id=ref.launch_id, gpus=gpus,
            resources=cmd.resources.times(cmd.nodes),
            privacy=effective_privacy(policy.privacy, cmd.privacy))
        self.state = agent_state.apply(self.state, accepted)
        await self.bus.publish(accepted)
        request = LaunchRequested(
            **answer("launch"), **ref.fields(), launch_id=ref.launch_id,
            entrypoint=cmd.entrypoint, resources=cmd.resources, gpus=gpus,
            image=cmd.image or policy.images.default, code_digest=cmd.code_digest,
            params=cmd.params, env=dict(policy.env),
            secret_refs={k: v.source for k, v in policy.secret_env.items()},
            datasets={k: DatasetMount(source=v.source, mode=v.mode)
                      for k, v in policy.datasets.items()},
            timeout_s=cmd.timeout_s, platform=platform_settings(policy), nodes=cmd.nodes)
        await self.bus.publish(request)

    async def _cancel(self, cmd: CancelCommand) -> None:
        for a in self.state.of_job(cmd.job):
            await self.bus.publish(LaunchCancel(
                **event_envelope(f"agent@{self.site}", id=f"{a.launch_id}.cancel", study=a.study,
                           actor=cmd.actor, cause=cmd.id),
                launch_id=a.launch_id, job=a.job, site=self.site, reason=cmd.reason,
                grace_s=cmd.grace_s))

    # -- loops ----------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        self.seq += 1
        runtime = self.runtime_file.current
        hb = Heartbeat(**stamp(), source=f"agent@{self.site}", site=self.site, seq=self.seq,
                       backend=self.site_cfg.backend,
                       capacity=self.site_cfg.inventory, free=self.free(),
                       running=len(self.state.allocations),
                       studies=sorted(runtime.studies) if runtime else [],
                       started_at=self.started_at)
        from cairn.events import encode

        await self.bus.publish_core(subjects.heartbeat(self.site), encode(hb))
        try:
            await self._sites_kv.put(self.site, hb, timeout=0)
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

