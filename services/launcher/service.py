"""The launcher: turns launch requests into workers through the site's backend, watches them,
cancels them, and after a restart reattaches to live workers and reports those that ended.

Its launches are a pure fold (`cairn.state.launch`) over the commands it takes and the worker
facts it publishes; each step is also written as a record in KV `launches_<site>`, so a
restarted launcher starts from them. A launch id seen once is never launched again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from pathlib import Path
from typing import Any, ClassVar

from cairn import api, subjects, telemetry, tracespool
from cairn.bus import KV, Bus, Delivery, kv, skipper
from cairn.errors import CairnError, InvalidInput, NotFound
from cairn.events import (
    SITE_DECODER,
    BackendDeclared,
    LaunchCancel,
    LaunchRequested,
    WorkerAllocation,
    WorkerExited,
    WorkerLaunching,
    WorkerRunning,
    now,
    stamp,
)
from cairn.launcher.backends.base import (
    Backend,
    LaunchHandle,
    LaunchSpec,
    WorkerExit,
    capability_names,
    load_backend,
)
from cairn.launcher.backends.errors import ImageNotApproved, StudyRefused
from cairn.launcher.inputs import code_bundle, read_from, resolve_secrets
from cairn.launcher.records import LaunchRecord, kv_key
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.spec.runtime import StudyRuntime, load_study_runtime
from cairn.spec.site import SiteConfig, load_site_config
from cairn.state import launch as launch_state
from cairn.state.launch import Launches, LaunchState
from cairn.subjects import ApiAddress

log = logging.getLogger("cairn.launcher")


class LauncherService:
    name: ClassVar[str] = "launcher"

    def __init__(self, config: ServiceConfig) -> None:
        if not config.site_config:
            raise CairnError("the launcher needs --site-config (site.yaml)")
        self.config = config
        self.site_cfg: SiteConfig = load_site_config(config.site_config)
        self._runtime_good: StudyRuntime | None = None
        self.site = self.site_cfg.site
        self.workdir = Path(self.site_cfg.workdir)
        self.backend: Backend | None = None
        self.launches = Launches()
        self.records: dict[str, LaunchRecord] = {}
        """The durable side of each launch: the backend's handle and how it ended."""
        self.watchers: dict[str, asyncio.Task[None]] = {}
        self._kv: KV[LaunchRecord] | None = None
        self._ready = False
        self.rt: Runtime | None = None

    @property
    def bus(self) -> Bus:
        assert self.rt is not None
        return self.rt.bus

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        running = len(self.launches.live())
        # The process backend says how its workers are isolated (sandbox, worker uids).
        own = getattr(self.backend, "health", None)
        return {"backend": self.site_cfg.backend, "workers": running,
                **(own() if callable(own) else {})}

    async def start(self, rt: Runtime) -> None:
        try:
            self._runtime_good = load_study_runtime(self.site_cfg.runtime)
        except CairnError as exc:
            log.warning("study_runtime.yaml not usable yet: %s", exc)
        self.rt = rt
        rt.site = self.site
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Imported here, by name: a site loads only the backend it uses.
        options: dict[str, Any] = {"workdir": self.workdir}
        if self.site_cfg.backend == "process":
            options["warm"] = True  # Python workers start from a warm interpreter
            process = self.site_cfg.process  # site.yaml: sandbox and worker uids
            options.update(sandbox=process.sandbox, worker_uids=process.worker_uids,
                           read_only=process.read_only, protected=self._protected())
        if self.site_cfg.backend == "slurm":
            options["cluster"] = self.site_cfg.slurm  # site.yaml: cli or slurmrestd
        if self.site_cfg.backend == "kubernetes":
            options["cluster"] = self.site_cfg.kubernetes  # site.yaml: how to reach the API
        self.backend = load_backend(self.site_cfg.backend, **options)
        if (isolation := getattr(self.backend, "isolation", None)) is not None:
            (log.info if isolation.sandbox else log.warning)("%s", isolation.summary())
        await rt.bus.ensure_site(self.site)
        self._kv = await kv(rt.bus, subjects.kv_launches(self.site), LaunchRecord,
                            on_undecodable=skipper(rt.bus, site=self.site, service="launcher"))
        async for _, record in self._kv.items():
            self.records[record.launch_id] = record
            self.launches = launch_state.Launches(
                launches={**self.launches.launches, record.launch_id: _state_of(record)})
        # In the background: FEDERATION may not exist yet on a federation's first start, and
        # launching does not wait on it (the agent waits a while, then the launcher checks).
        rt.spawn(self._declare_backend(self.backend), "launcher-declare-backend")
        await self._reconcile()
        await rt.consume(stream=subjects.site_stream(self.site).name, durable="launcher",
                         filters=[subjects.site_launch_all(self.site)], decoder=SITE_DECODER,
                         handler=self._on_command)
        await rt.serve_api(subjects.site_logs(self.site), self._serve_logs)
        self._ready = True

    def _protected(self) -> list[str]:
        """What no worker may see: this launcher's credentials and TLS files, its site
        config and the folder of its study_runtime.yaml (`local/`)."""
        config = self.config
        paths = [config.creds, config.tls_cert, config.tls_key, config.site_config,
                 str(Path(self.site_cfg.runtime).parent)]
        return [p for p in paths if p]

    async def stop(self) -> None:
        self._ready = False
        for task in self.watchers.values():
            task.cancel()
        await asyncio.gather(*self.watchers.values(), return_exceptions=True)
        if self.backend is not None:
            await self.backend.close()

    async def _declare_backend(self, backend: Backend) -> None:
        declared = BackendDeclared(**stamp(), source=f"launcher@{self.site}", site=self.site,
                                   backend=backend.name,
                                   capabilities=capability_names(backend.capabilities))
        for _ in range(10):  # each publish retries for 30 s: 5 minutes in all
            try:
                await self.bus.publish(declared)
                return
            except CairnError as exc:
                log.warning("could not declare the backend yet: %s", exc)
        log.error("gave up declaring the backend; the agent cannot check capabilities")

    # -- reconcile after a restart ----------------------------------------------------------

    async def _reconcile(self) -> None:
        assert self.backend is not None
        for launch in self.launches.live():
            record = self.records[launch.launch_id]
            if record.handle is None:
                # Crashed between writing the record and starting the worker.
                await self._report(launch, WorkerExit(
                    launch_id=record.launch_id, exit_code=None, cause="infrastructure",
                    message="the launcher stopped while starting this worker", ended_at=now()))
                continue
            found = await self.backend.reattach(record.handle)
            if isinstance(found, WorkerExit):
                log.info("worker %s ended while the launcher was down", record.launch_id)
                await self._report(launch, found)
            else:
                log.info("reattached to worker %s", record.launch_id)
                running = None
                if launch.state == "launching" and getattr(self.backend, "started", None):
                    # It was still waiting to start (a pending pod) when the launcher stopped.
                    running = WorkerRunning(**self._event_base(launch, "running"),
                                            native_id=found.native_id)
                self._watch(launch, found, running=running)

    # -- commands ---------------------------------------------------------------------------

    async def _on_command(self, event: Any, d: Delivery) -> None:
        match event:
            case LaunchRequested():
                await self._launch(event)
            case LaunchCancel():
                await self._cancel(event)

    async def _record(self, event: object, *, handle: LaunchHandle | None = None,
                      exit: WorkerExit | None = None) -> LaunchState:
        """Fold one step into the launches and write its record before anything follows."""
        self.launches = launch_state.apply(self.launches, event)
        launch = self.launches.get(getattr(event, "launch_id", ""))
        assert launch is not None
        previous = self.records.get(launch.launch_id)
        record = LaunchRecord(
            launch_id=launch.launch_id, study=launch.study, job=launch.job, site=launch.site,
            role=launch.role, rank=launch.rank, attempt=launch.attempt,
            state="launching" if launch.state == "requested" else launch.state,  # type: ignore[arg-type]
            handle=handle or (previous.handle if previous else None),
            exit=exit or (previous.exit if previous else None),
            requested_at=launch.requested_at, cancelled=launch.cancelled)
        self.records[record.launch_id] = record
        assert self._kv is not None
        await self._kv.put(kv_key(record.launch_id), record)
        return launch

    def _event_base(self, launch: LaunchState, what: str) -> dict[str, Any]:
        return {"id": f"{launch.launch_id}.{what}", "at": now(),
                "source": f"launcher@{self.site}", "study": launch.study, "job": launch.job,
                "site": self.site, "role": launch.role, "rank": launch.rank,
                "attempt": launch.attempt, "launch_id": launch.launch_id}

    async def _launch(self, req: LaunchRequested) -> None:
        assert self.backend is not None
        if not launch_state.is_new(self.launches, req.launch_id):
            return  # seen before, under any message id: a launch id is launched at most once
        launch = await self._record(req)
        launching = WorkerLaunching(**self._event_base(launch, "launching"),
                                    backend=self.backend.name, cause=req.id)
        launch = await self._record(launching)
        await self.bus.publish(launching)
        try:
            why = launch_state.unsupported(
                req, self.backend.name, frozenset(capability_names(self.backend.capabilities)))
            if why is not None:
                raise InvalidInput(why, field="gpus")
            await self._guard(req)
            spec = await self._spec(req)
            handle = await self.backend.launch(spec)
        except CairnError as exc:
            cause = exc.code if isinstance(exc, ImageNotApproved | StudyRefused) else \
                "launch-failed"
            await self._report(launch, WorkerExit(
                launch_id=req.launch_id, exit_code=None, cause=cause,  # type: ignore[arg-type]
                message=str(exc), ended_at=now()))
            return
        running = WorkerRunning(**self._event_base(launch, "running"),
                                native_id=handle.native_id, allocation=WorkerAllocation(
                                    gpus=spec.gpus_asked, gpu_ids=list(spec.gpus),
                                    cpus=list(handle.cpus), memory_bytes=spec.memory_bytes))
        if getattr(self.backend, "started", None) is not None:
            # A backend whose worker may wait to start (a pod pending for a node): the handle
            # is kept now, `worker.running` sent once the worker really runs.
            launch = await self._record(launching, handle=handle)
            self._watch(launch, handle, running=running)
            return
        launch = await self._record(running, handle=handle)
        await self.bus.publish(running)
        self._watch(launch, handle)

    async def _spec(self, req: LaunchRequested) -> LaunchSpec:
        code_dir = await code_bundle(self.bus, self.workdir, req.study or "", req.code_digest)
        # A Kubernetes Secret is mounted into the pod by the cluster: never read here.
        own, mounted = dict(req.secret_refs), {}
        if self.site_cfg.backend == "kubernetes":
            mounted = {k: v for k, v in own.items() if v.startswith("k8s:")}
            own = {k: v for k, v in own.items() if k not in mounted}
        env = {
            "CAIRN_NATS_URL": self.site_cfg.worker_nats_url, "CAIRN_STUDY": req.study or "",
            "CAIRN_JOB": req.job, "CAIRN_SITE": self.site, "CAIRN_ROLE": req.role,
            "CAIRN_RANK": str(req.rank), "CAIRN_ATTEMPT": str(req.attempt),
            "CAIRN_PARAMS": json.dumps(req.params),
        }
        # The job's trace goes on in the worker: W3C headers as env, and where this launcher
        # exports spans, the worker exports to the same place, sampled the same way.
        for header, value in telemetry.current_headers().items():
            env[header.upper()] = value
        if telemetry.enabled():
            env.update({k: v for k in TRACING_ENV if (v := os.environ.get(k))})
        return LaunchSpec(
            launch_id=req.launch_id, job=req.job, study=req.study or "", site=self.site,
            role=req.role, rank=req.rank, attempt=req.attempt, entrypoint=req.entrypoint,
            code_dir=str(code_dir), env=env, study_env=dict(req.env),
            secret_env={**resolve_secrets(own), **self._worker_creds(req)},
            secret_refs=mounted,
            datasets=dict(req.datasets),
            gpus=list(req.gpus), millicpus=req.resources.millicpus,
            memory_bytes=req.resources.memory_bytes, timeout_s=req.timeout_s or None,
            image=req.image or "", platform=dict(req.platform or {}),
            gpus_requested=req.resources.gpus, nodes=req.nodes,
            trusted_code=self._trusted_code(req.study or ""))

    def _trusted_code(self, study: str) -> bool:
        """study_runtime.yaml's `trusted_code` for the study (the file `_guard` just read)."""
        policy = self._runtime_good.studies.get(study) if self._runtime_good else None
        return bool(policy and policy.trusted_code)

    async def _guard(self, req: LaunchRequested) -> None:
        """Defence in depth: only what this site's study_runtime.yaml gives the study, and
        only the worker the coordinator asked for (see `cairn.trust.launchguard`)."""
        from cairn.bus import replay
        from cairn.events import STUDY_DECODER, DeployCommand
        from cairn.trust import launchguard

        try:
            runtime = load_study_runtime(self.site_cfg.runtime)
            self._runtime_good = runtime
        except CairnError:
            # A broken edit leaves the last good file in force, as it does for the agent.
            if self._runtime_good is None:
                raise
            runtime = self._runtime_good
        launchguard.check_against_runtime(req, runtime)
        deploy = None
        study = req.study or ""
        async for item in replay(self.bus, subjects.study_stream(study).name, STUDY_DECODER,
                                 filters=[subjects.site_cmd(study, self.site, "deploy")]):
            if isinstance(item.event, DeployCommand) and launchguard.matches(item.event, req):
                deploy = item.event
        launchguard.check_against_deploy(req, deploy)

    def _worker_creds(self, req: LaunchRequested) -> dict[str, str]:
        """In a secure federation, the worker's job-lifetime credential (secret files)."""
        if not self.config.creds:
            return {}
        from cairn.trust.workers import worker_secrets

        return worker_secrets(self.config.creds, self.config.tls_ca, study=req.study or "",
                              job=req.job, site=self.site, role=req.role,
                              attempt=req.attempt, launch_id=req.launch_id,
                              timeout_s=req.timeout_s or None)

    def _watch(self, launch: LaunchState, handle: LaunchHandle,
               running: WorkerRunning | None = None) -> None:
        self.watchers[launch.launch_id] = asyncio.create_task(
            self._wait(launch.launch_id, handle, running), name=f"watch:{launch.launch_id}")

    async def _wait(self, launch_id: str, handle: LaunchHandle,
                    running: WorkerRunning | None = None) -> None:
        assert self.backend is not None
        try:
            if running is not None and await self.backend.started(handle) is None:  # type: ignore[attr-defined]
                await self._record(running, handle=handle)
                await self.bus.publish(running)
            result = await self.backend.wait(handle)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("watching %s failed", launch_id)
            result = WorkerExit(launch_id=launch_id, exit_code=None, cause="infrastructure",
                                message=f"lost track: {exc}", ended_at=now())
        launch = self.launches.get(launch_id)
        assert launch is not None
        await self._report(launch, result)
        self.watchers.pop(launch_id, None)
        if getattr(self.backend, "spools_traces", False) and telemetry.enabled():
            # After the end is published: the job does not wait for its spans to go out.
            try:
                await asyncio.to_thread(telemetry.forward_spool,
                                        tracespool.spool_path(handle.workdir))
            except Exception:
                log.warning("could not forward the spans of %s", launch_id, exc_info=True)

    async def _report(self, launch: LaunchState, result: WorkerExit) -> None:
        # The latest state: a cancel may have arrived while the worker ran.
        launch = self.launches.get(launch.launch_id) or launch
        exited = WorkerExited(**self._event_base(launch, "exited"), exit_code=result.exit_code,
                              reason=launch_state.exit_cause(launch, result.exit_code,
                                                             result.cause),
                              message=result.message)
        # Published before it is recorded: a launcher killed in between reports it again on
        # restart (the same message id), rather than never.
        await self.bus.publish(exited)
        await self._record(exited, exit=result)

    async def _cancel(self, cmd: LaunchCancel) -> None:
        assert self.backend is not None
        launch = self.launches.get(cmd.launch_id)
        record = self.records.get(cmd.launch_id)
        if launch is None or launch.exited or record is None or record.handle is None:
            return
        await self._record(cmd)
        assert self.rt is not None
        self.rt.spawn(self.backend.cancel(record.handle, cmd.grace_s), f"cancel:{cmd.launch_id}")

    # -- logs -------------------------------------------------------------------------------

    async def _serve_logs(self, envelope: api.Envelope, address: ApiAddress) -> api.Result:
        match envelope.request:
            case api.LogRead(launch_id=launch_id, offset=offset, max_bytes=max_bytes):
                pass
            case other:
                raise NotFound(f"the launcher does not serve {api.verb_of(other)!r}")
        record = self.records.get(launch_id)
        if record is None or record.handle is None:
            raise NotFound(f"no worker {launch_id} at site {self.site}", field="launch_id")
        offset = max(0, offset)
        limit = max(1, min(max_bytes, 1024 * 1024))
        data = await asyncio.to_thread(read_from, Path(record.handle.log_path), offset, limit)
        done = record.state == "exited" and len(data) < limit
        return api.LogData(data_b64=base64.b64encode(data).decode(), offset=offset + len(data),
                           done=done)


TRACING_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG")
"""What a launcher that traces hands its workers, so their spans land beside its own."""


def _state_of(record: LaunchRecord) -> LaunchState:
    """A launch as its last record left it (a restarted launcher folds on from there)."""
    exit = record.exit
    return LaunchState(
        launch_id=record.launch_id, study=record.study, job=record.job, site=record.site,
        role=record.role, rank=record.rank, attempt=record.attempt, state=record.state,
        requested_at=record.requested_at, updated_at=record.requested_at,
        cancelled=record.cancelled, native_id=record.handle.native_id if record.handle else "",
        exit_code=exit.exit_code if exit else None, reason=exit.cause if exit else None,
        message=exit.message if exit else "")
