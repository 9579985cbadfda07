"""A simulated site: the agent and the launcher of one site in one cheap object, whose
workers are fakes (`cairn sim-sites`).

Seen from the coordinator a simulated site is a site: it connects with the site's own
credential (so the broker lets it publish only that site's subjects, as derived from the
subject table), heartbeats its capacity on its own subject and KV key, reads the commands
on its own durable consumer (`agent-<site>`), and answers every deploy with the events a
real site sends, with the same envelopes and deterministic ids: `deployment.accepted`
(agent), `worker.launching`, `worker.running` and, after `simsite_run_s`, `worker.exited`
(launcher). With `simsite_worker_reports` on, each fake worker also reports as a real
worker does: its launcher mints it a job-lifetime credential with the site's signing key,
and the fake worker connects with it for as long as it takes to publish one
`worker.progress` and one `worker.result` on its own worker subjects.

What it does not do: no process, container or folder per worker, no policy file (every
deploy within the site's inventory is accepted), no launch records. Many of them run in one
process (`cairn.runtime.sites`, service name `simsite`).
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from cairn import subjects
from cairn.bus import Bus, Delivery, kv, replay
from cairn.errors import CairnError
from cairn.events import (
    STUDY_DECODER,
    CancelCommand,
    DeployCommand,
    DeploymentAccepted,
    DeploymentRejected,
    EventEnvelope,
    Heartbeat,
    Resources,
    WorkerExited,
    WorkerLaunching,
    WorkerProgress,
    WorkerResult,
    WorkerRunning,
    encode,
    event_envelope,
    now,
    stamp,
    worker_ref,
)
from cairn.events.workerref import WorkerRef
from cairn.names import is_name
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.spec.site import SiteConfig, load_site_config
from cairn.trust.connect import member_studies

log = logging.getLogger("cairn.simsite")
T = TypeVar("T")

BACKEND = "simulated"
WORKER_CONNECTS_AT_ONCE = 4
"""Fake workers of one site connecting at the same time (each connection is a TLS handshake
and an authority decision)."""
WORKER_CONNECT_S = 60.0
"""How long a fake worker tries to connect before it counts as crashed (a busy machine)."""


START_S = 600.0
"""How long a simulated site tries each step of its start: 10,000 sites starting at once on
a small machine keep JetStream's API minutes behind, and one site that gave up would take
every site of its process with it."""


async def _retried(step: Callable[[], Awaitable[T]], what: str) -> T:
    """`step()`, tried again with a growing pause (at most 5 s) while it fails, for START_S."""
    deadline = time.monotonic() + START_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return await step()
        except Exception as exc:  # a timeout of nats-py's, or the bus's own error
            if time.monotonic() >= deadline:
                raise
            log.info("%s: %s; again (attempt %d)", what, exc or type(exc).__name__, attempt)
            await asyncio.sleep(min(0.5 * attempt, 5.0))


class SimulatedSiteService:
    """One site's agent and launcher, with fake workers (see the module docstring)."""

    name: ClassVar[str] = "simsite"

    def __init__(self, config: ServiceConfig) -> None:
        if not config.site_config:
            raise CairnError("a simulated site needs --site-config (site.yaml)")
        self.config = config
        self.site_cfg: SiteConfig = load_site_config(config.site_config)
        self.site = self.site_cfg.site
        opts = config.options
        self.run_s = max(0.0, float(opts.get("simsite_run_s", 0.0)))
        self.worker_reports = opts.get("simsite_worker_reports", "on") not in ("off", "0", "")
        # A bench's knob: until this file exists the site says it has no free capacity, so
        # jobs queue; then every site offers its capacity at once, and the coordinator's
        # dispatch rate is measured on a backlog, not on the rate jobs are submitted.
        self.started_at = datetime.now(UTC)
        self.decided: set[str] = set()
        """Launch ids answered (accepted or rejected): a redelivered deploy is not twice."""
        self.live: dict[str, tuple[DeployCommand, Resources]] = {}
        """Launch id -> its deploy and what it holds, until its fake worker exits."""
        self.studies: set[str] = set()
        self.seq = 0
        self.launched = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._connects = asyncio.Semaphore(WORKER_CONNECTS_AT_ONCE)
        self._ready = False
        self.rt: Runtime | None = None

    @property
    def bus(self) -> Bus:
        assert self.rt is not None
        return self.rt.bus

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        return {"simulated": True, "running": len(self.live), "launched": self.launched}

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        rt.site = self.site
        # Hundreds of sites of one machine starting at once can outwait JetStream's API:
        # each step is tried again (a real site's supervisor would start it again).
        self._sites_kv = await _retried(lambda: kv(rt.bus, subjects.KV_SITES, Heartbeat),
                                        f"{self.site}: the sites bucket")
        member = await _retried(lambda: member_studies(rt.bus, self.site),
                                f"{self.site}: its studies")
        names = sorted(member) if member is not None else [
            s.removeprefix(subjects.STUDY_STREAM_PREFIX)
            for s in await rt.bus.stream_names(subjects.STUDY_STREAM_PREFIX)]
        for study in names:
            if is_name(study):
                await _retried(lambda study=study: self._open_study(study),  # type: ignore[misc]
                               f"{self.site}: study {study}")
        await self._heartbeat()
        rt.spawn(self._heartbeats(), "simsite-heartbeat")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        for task in list(self._tasks):
            task.cancel()

    async def _open_study(self, study: str) -> None:
        assert self.rt is not None
        if study in self.studies:
            return
        stream = subjects.study_stream(study).name
        # What this site answered before a restart: answered once, never again.
        async for item in replay(self.bus, stream, STUDY_DECODER,
                                 filters=[subjects.site_job_events(study, self.site)]):
            match item.event:
                case DeploymentAccepted() | DeploymentRejected():
                    self.decided.add(worker_ref(item.event).launch_id)
        await self.rt.consume(stream=stream, durable=f"agent-{self.site}",
                              filters=[subjects.site_cmds(study, self.site)],
                              decoder=STUDY_DECODER, handler=self._on_command)
        self.studies.add(study)

    # -- commands -------------------------------------------------------------------------

    async def _on_command(self, event: Any, _d: Delivery) -> None:
        match event:
            case DeployCommand():
                await self._deploy(event)
            case CancelCommand():
                for cmd, _ in list(self.live.values()):
                    if cmd.job == event.job:
                        await self._exit(cmd, code=None, reason="cancelled",
                                         message=event.reason)

    def free(self) -> Resources:
        free = self.site_cfg.inventory
        for _, held in self.live.values():
            free = free - held
        return free

    async def _deploy(self, cmd: DeployCommand) -> None:
        ref = worker_ref(cmd)
        if ref.launch_id in self.decided:
            return
        self.decided.add(ref.launch_id)
        held = cmd.resources.times(cmd.nodes)
        agent = self._envelope("agent", ref, cmd)
        if not held.fits_in(self.free()):
            await self.bus.publish(DeploymentRejected(
                **agent("rejected"), **ref.fields(), reason="site-policy",
                message="not enough capacity: " + ", ".join(held.shortfall(self.free()))))
            return
        self.live[ref.launch_id] = (cmd, held)
        self.launched += 1
        launcher = self._envelope("launcher", ref, cmd)
        await self.bus.publish(DeploymentAccepted(
            **agent("accepted"), **ref.fields(), launch_id=ref.launch_id, resources=held))
        await self.bus.publish(WorkerLaunching(
            **launcher("launching"), **ref.fields(), launch_id=ref.launch_id,
            backend=BACKEND))
        await self.bus.publish(WorkerRunning(
            **launcher("running"), **ref.fields(), launch_id=ref.launch_id,
            native_id=f"sim-{ref.launch_id}"))
        task = asyncio.create_task(self._work(cmd), name=f"simworker-{ref.launch_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _work(self, cmd: DeployCommand) -> None:
        """The fake worker: wait its run time, report as a worker would, exit 0."""
        try:
            if self.run_s:
                await asyncio.sleep(self.run_s)
            if self.worker_reports:
                await self._report(cmd)
            await self._exit(cmd, code=0, reason=None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("simulated worker %s: %s", worker_ref(cmd).launch_id, exc)
            await self._exit(cmd, code=1, reason="crashed", message=str(exc))

    async def _exit(self, cmd: DeployCommand, *, code: int | None, reason: str | None,
                    message: str = "") -> None:
        ref = worker_ref(cmd)
        if self.live.pop(ref.launch_id, None) is None:
            return  # exited already (a cancel after its end)
        await self.bus.publish(WorkerExited(
            **self._envelope("launcher", ref, cmd)("exited"), **ref.fields(),
            launch_id=ref.launch_id, exit_code=code, reason=reason, message=message))

    async def _report(self, cmd: DeployCommand) -> None:
        """Connect as the worker (a credential minted here, as the launcher mints one) and
        publish its progress and result on its own subjects."""
        from cairn.trust.workers import CREDS_SECRET, worker_secrets

        assert self.rt is not None
        ref = worker_ref(cmd)
        creds = self.config.creds
        study = cmd.study or ""

        def who() -> dict[str, Any]:  # a fresh id per event: JetStream drops a repeated one
            return {**event_envelope(f"worker@{self.site}", study=study),
                    **ref.report_fields()}

        if creds is None:  # an insecure federation: the site's own connection
            await self.bus.publish(WorkerProgress(**who(), step=1, total=1,
                                                  message="simulated"))
            await self.bus.publish(WorkerResult(**who(), value={"simulated": True}))
            return
        secrets = worker_secrets(creds, self.config.tls_ca, study=study, job=ref.job,
                                 site=self.site, role=ref.role, attempt=ref.attempt,
                                 launch_id=ref.launch_id, timeout_s=cmd.timeout_s)
        async with self._connects:
            with tempfile.TemporaryDirectory(prefix="cairn-simworker-") as tmp:
                path = Path(tmp) / "worker.creds"
                path.touch(mode=0o600)
                path.write_text(secrets[CREDS_SECRET])
                worker = await Bus.connect(self.config.nats_url, name=f"simworker-{ref.job}",
                                           creds=str(path), tls=self.config.tls_context(),
                                           connect_timeout=10.0, retry_for=WORKER_CONNECT_S)
        try:
            await worker.publish(WorkerProgress(**who(), step=1, total=1, message="simulated"))
            await worker.publish(WorkerResult(**who(), value={"simulated": True}))
        finally:
            await worker.close()

    def _envelope(self, service: str, ref: WorkerRef, cmd: DeployCommand
                  ) -> Callable[[str], EventEnvelope]:
        """The envelope maker of one answer to `cmd`: ids `<launch id>.<what>`, as the real
        agent's and launcher's, so a redelivered deploy's answers are dropped as duplicates."""
        at = now()

        def envelope(what: str) -> EventEnvelope:
            return event_envelope(f"{service}@{self.site}", id=f"{ref.launch_id}.{what}",
                                  at=at, study=cmd.study, actor=cmd.actor, cause=cmd.id)

        return envelope

    # -- heartbeats -----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        self.seq += 1
        hb = Heartbeat(**stamp(), source=f"agent@{self.site}", site=self.site, seq=self.seq,
                       backend=BACKEND, capacity=self.site_cfg.inventory, free=self.free(),
                       running=len(self.live), studies=sorted(self.studies),
                       started_at=self.started_at)
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
