"""The launcher: turns launch requests into workers through the site's backend, watches them,
cancels them, and after a restart reattaches to live workers and reports those that ended.

Its launches are a pure fold (`cairn.state.launch`) over the commands it takes and the worker
facts it publishes; each step is also written as a record in KV `launches_<site>`, so a
restarted launcher starts from them. A launch id seen once is never launched again.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from cairn import subjects, telemetry, tracespool
from cairn.bus import KV, Bus, Delivery, UndecodableRecord, kv
from cairn.errors import CairnError, InvalidInput
from cairn.events import (
    SITE_DECODER,
    BackendDeclared,
    DeployCommand,
    EventEnvelope,
    LaunchCancel,
    LaunchRequested,
    WorkerAllocation,
    WorkerFields,
    WorkerLaunching,
    WorkerRunning,
    event_envelope,
    now,
    stamp,
    worker_ref,
)
from cairn.launcher import orphans, started
from cairn.launcher.backends.base import (
    Backend,
    LaunchHandle,
    WorkerExit,
    capability_names,
    load_backend,
)
from cairn.launcher.backends.errors import ImageNotApproved, StudyRefused
from cairn.launcher.ends import WorkerEnds
from cairn.launcher.logaccess import LogReader
from cairn.launcher.records import (
    IndexedDeploy,
    IndexMark,
    LaunchRecord,
    deploy_prefix,
    is_record_key,
    kv_key,
    mark_key,
)
from cairn.launcher.studies import Studies
from cairn.launcher.unreportable import dead_letter
from cairn.launcher.workerspec import worker_spec
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.spec.runtime import StudyRuntime, load_study_runtime
from cairn.spec.site import SiteConfig, load_site_config
from cairn.state import launch as launch_state
from cairn.state.launch import Launches, LaunchState
from cairn.trust import launchguard

log = logging.getLogger("cairn.launcher")


class LaunchFactFields(EventEnvelope, WorkerFields):
    """What the launcher's facts about one launch start with (launching, running, exited)."""

    launch_id: str


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
        self._studies: Studies | None = None
        self.ends = WorkerEnds(self)
        self._ready = False
        self.rt: Runtime | None = None
        self._isolating: asyncio.Future[Any] | None = None

    def prepare(self) -> None:
        """Begin the part of the start that needs no bus: a process backend's isolation
        probe (bwrap starting an interpreter, most of a launcher's start), in a thread, so it
        runs while the parent connects and starts its other services (`start` awaits it)."""
        if self._isolating is not None or self.site_cfg.backend != "process":
            return
        from cairn.launcher.backends.process import isolation_for

        process = self.site_cfg.process
        self._isolating = asyncio.ensure_future(asyncio.to_thread(
            isolation_for, self.workdir, sandbox=process.sandbox,
            worker_uids=process.worker_uids, read_only=process.read_only,
            protected=self._protected()))
        # Told by `start`; a parent stopped before it starts must not log it as unretrieved.
        self._isolating.add_done_callback(lambda f: f.cancelled() or f.exception())

    @property
    def bus(self) -> Bus:
        assert self.rt is not None
        return self.rt.bus

    @property
    def studies(self) -> Studies:
        assert self._studies is not None
        return self._studies

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
            self.prepare()
            assert self._isolating is not None
            options["isolation"] = await self._isolating
        if self.site_cfg.backend == "slurm":
            options["cluster"] = self.site_cfg.slurm  # site.yaml: cli or slurmrestd
        if self.site_cfg.backend == "kubernetes":
            options["cluster"] = self.site_cfg.kubernetes  # site.yaml: how to reach the API
        self.backend = load_backend(self.site_cfg.backend, **options)
        if (isolation := getattr(self.backend, "isolation", None)) is not None:
            (log.info if isolation.sandbox else log.warning)("%s", isolation.summary())
        await rt.bus.ensure_site(self.site)
        await self._load()
        # In the background: FEDERATION may not exist yet on a federation's first start, and
        # launching does not wait on it (the agent waits a while, then the launcher checks).
        rt.spawn(self._declare_backend(self.backend), "launcher-declare-backend")
        await self.studies.scan()
        await self.ends.reconcile()
        await rt.consume(stream=subjects.site_stream(self.site).name, durable="launcher",
                         filters=[subjects.site_launch_all(self.site)], decoder=SITE_DECODER,
                         handler=self._on_command)
        logs = LogReader(self.site, self.config.creds, self.records, self.studies)
        await rt.serve_api(subjects.site_logs(self.site), logs.serve)
        self._ready = True

    async def _load(self) -> None:
        """Launch records and the deploy index, as the last run left them in KV."""
        assert self.rt is not None
        bucket = subjects.kv_launches(self.site)
        self._kv = await kv(self.bus, bucket, LaunchRecord, on_undecodable=self._garbage)
        deploys = await kv(self.bus, bucket, IndexedDeploy, on_undecodable=self._garbage)
        marks = await kv(self.bus, bucket, IndexMark, on_undecodable=self._garbage)
        self._studies = Studies(self.rt, self.site, deploys, marks,
                                launched=lambda launch_id: launch_id in self.launches.launches)
        stored: dict[str, IndexedDeploy] = {}
        found: dict[str, IndexMark] = {}
        for key in await self._kv.keys():
            if is_record_key(key):
                if (record := await self._kv.get(key)) is not None:
                    self.records[record.launch_id] = record
            elif key.startswith(deploy_prefix("")):
                if (entry := await deploys.get(key)) is not None:
                    stored[worker_ref(entry.deploy).launch_id] = entry
            elif key.startswith(mark_key("")) and (mark := await marks.get(key)) is not None:
                found[key.removeprefix(mark_key(""))] = mark
        self.launches = Launches(launches={r.launch_id: _state_of(r)
                                           for r in self.records.values()})
        self.studies.restore(stored, found)

    async def _garbage(self, record: UndecodableRecord) -> None:
        """A KV entry that does not decode: dead-lettered and reported, then deleted, so the
        next start does not report it again (a redrive of the dead letter puts it back)."""
        if await dead_letter(self.bus, site=self.site, store=record.store,
                             subject=record.subject, key=record.key, seq=record.seq,
                             data=record.data, headers=record.headers,
                             why=f"undecodable at start: {record.message}"):
            assert self._kv is not None
            try:
                await self._kv.delete(record.key)
            except Exception as exc:  # reported again next start: no worse than before
                log.warning("could not delete the skipped entry %s: %s", record.key, exc)

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

    # -- commands ---------------------------------------------------------------------------

    async def _on_command(self, event: Any, d: Delivery) -> None:
        match event:
            case LaunchRequested():
                await self._launch(event, d)
            case LaunchCancel():
                await self._cancel(event)

    async def record(self, event: object, *, handle: LaunchHandle | None = None,
                     exit: WorkerExit | None = None, dead_lettered: str = "") -> LaunchState:
        """Fold one step into the launches and write its record before anything follows."""
        self.launches = launch_state.apply(self.launches, event)
        launch = self.launches.get(getattr(event, "launch_id", ""))
        assert launch is not None
        previous = self.records.get(launch.launch_id)
        record = LaunchRecord(
            **launch.launch_fields(),
            state="launching" if launch.state == "requested" else launch.state,  # type: ignore[arg-type]
            handle=handle or (previous.handle if previous else None),
            exit=exit or (previous.exit if previous else None),
            requested_at=launch.requested_at, cancelled=launch.cancelled,
            dead_lettered=dead_lettered, cancel_cause=launch.cancel_cause)
        self.records[record.launch_id] = record
        assert self._kv is not None
        await self._kv.put(kv_key(record.launch_id), record)
        return launch

    async def remember(self, launch_id: str, handle: LaunchHandle) -> None:
        """Keep the handle of a worker found again (its record had none): a cancel reaches it
        now, and the next start reattaches to it."""
        record = msgspec.structs.replace(self.records[launch_id], handle=handle)
        self.records[launch_id] = record
        assert self._kv is not None
        await self._kv.put(kv_key(launch_id), record)

    def event_base(self, launch: LaunchState, what: str,
                   cause: str | None = None) -> LaunchFactFields:
        """The fields every worker fact of `launch` starts with; its id, `<launch id>.<what>`,
        is the same every time it is reported."""
        return {**event_envelope(f"launcher@{self.site}", id=f"{launch.launch_id}.{what}",
                           study=launch.study, cause=cause),
                **worker_ref(launch).fields(), "launch_id": launch.launch_id}

    async def _launch(self, req: LaunchRequested, d: Delivery) -> None:
        assert self.backend is not None
        if not launch_state.is_new(self.launches, req.launch_id):
            return  # seen before, under any message id: a launch id is launched at most once
        study = req.study or ""
        # A launch with nothing behind it (no study of this site's, no deploy command of its
        # launch id) is no launch of this site: dead-lettered, nothing recorded or reported
        # (a report would be refused, or would speak for a real worker of the same job).
        if not await self.studies.ensure(study):
            await self.ends.dead_letter_request(
                req, d, f"study {study!r} is not one of site {self.site}'s studies")
            return
        deploy = await self.studies.deploy_for(study, req.launch_id)
        if deploy is None:
            await self.ends.dead_letter_request(
                req, d, f"no deploy command for {req.launch_id} in study {study}: the "
                        f"coordinator did not deploy it to site {self.site}")
            return
        self.studies.forget(study, req.launch_id)  # a deploy command is used once
        try:
            launch = await self.record(req)
        except CairnError as exc:
            # Folded already, so a redelivery is not a new launch: say it failed instead of
            # leaving the job waiting for a worker nobody starts.
            await started.not_started(self, req.launch_id, f"could not record it: {exc}")
            return
        try:
            await self.studies.drop_stored(study, req.launch_id)
        except Exception as exc:  # a restart drops it: its launch id is recorded now
            log.warning("could not delete the used deploy command of %s: %s",
                        req.launch_id, exc)
        launching = WorkerLaunching(**self.event_base(launch, "launching", cause=req.id),
                                    backend=self.backend.name)
        try:
            launch = await self.record(launching)
            await self.bus.publish(launching)
        except CairnError as exc:
            if await self.studies.recheck(study) is not False:
                await started.not_started(self, req.launch_id, f"could not say so: {exc}")
                return
            # Removed from the study since the index last heard: nothing can be said there.
            await self.ends.unreportable(launch, f"its report was refused: site {self.site} "
                                                 f"is no longer in study {study} ({exc})")
            return
        try:
            why = launch_state.unsupported(
                req, self.backend.name, frozenset(capability_names(self.backend.capabilities)))
            if why is not None:
                raise InvalidInput(why, field="gpus")
            self._guard(req, deploy)
            spec = await worker_spec(self.bus, req, site_cfg=self.site_cfg,
                                     creds=self.config.creds, tls_ca=self.config.tls_ca,
                                     launcher_url=self.config.nats_url,
                                     trusted_code=self._trusted_code(req.study or ""))
            handle = await self.backend.launch(spec)
            orphans.die_after_submit(self.site, study)
        except CairnError as exc:
            cause = exc.code if isinstance(exc, ImageNotApproved | StudyRefused) else \
                "launch-failed"
            await self.ends.report_or_later(launch, WorkerExit(
                launch_id=req.launch_id, exit_code=None, cause=cause,  # type: ignore[arg-type]
                message=str(exc), ended_at=now()))
            return
        running = WorkerRunning(**self.event_base(launch, "running"),
                                native_id=handle.native_id, allocation=WorkerAllocation(
                                    gpus=spec.gpus_asked, gpu_ids=list(spec.gpus),
                                    cpus=list(handle.cpus), memory_bytes=spec.memory_bytes))
        try:
            await started.running(self, launching, running, handle)
        except CairnError as exc:
            # The worker runs: a failed record or report must not leave it unwatched (a
            # redelivery of the request is no new launch), so both are tried again.
            log.warning("worker %s started, but recording it failed (%s); retrying in the "
                        "background", req.launch_id, exc)
            assert self.rt is not None
            self.rt.spawn(started.running_later(self, launching, running, handle),
                          f"running:{req.launch_id}")

    def _trusted_code(self, study: str) -> bool:
        """study_runtime.yaml's `trusted_code` for the study (the file `_guard` just read)."""
        policy = self._runtime_good.studies.get(study) if self._runtime_good else None
        return bool(policy and policy.trusted_code)

    def _guard(self, req: LaunchRequested, deploy: DeployCommand) -> None:
        """Defence in depth: only what this site's study_runtime.yaml gives the study, and
        only the worker the coordinator's deploy command asked for, exactly
        (`cairn.trust.launchguard`)."""
        try:
            runtime = load_study_runtime(self.site_cfg.runtime)
            self._runtime_good = runtime
        except CairnError:
            # A broken edit leaves the last good file in force, as it does for the agent.
            if self._runtime_good is None:
                raise
            runtime = self._runtime_good
        policy = launchguard.check_against_runtime(req, runtime)
        launchguard.check_against_deploy(req, deploy, default_image=policy.images.default)

    def watch(self, launch: LaunchState, handle: LaunchHandle,
              running: WorkerRunning | None = None) -> None:
        self.watchers[launch.launch_id] = asyncio.create_task(
            self._wait(launch.launch_id, handle, running), name=f"watch:{launch.launch_id}")

    async def _wait(self, launch_id: str, handle: LaunchHandle,
                    running: WorkerRunning | None = None) -> None:
        assert self.backend is not None
        try:
            if running is not None and await self.backend.started(handle) is None:  # type: ignore[attr-defined]
                await self.record(running, handle=handle)
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
        await self.ends.report_or_later(launch, result)
        self.watchers.pop(launch_id, None)
        if getattr(self.backend, "spools_traces", False) and telemetry.enabled():
            # After the end is published: the job does not wait for its spans to go out.
            try:
                await asyncio.to_thread(telemetry.forward_spool,
                                        tracespool.spool_path(handle.workdir))
            except Exception:
                log.warning("could not forward the spans of %s", launch_id, exc_info=True)

    async def _cancel(self, cmd: LaunchCancel) -> None:
        assert self.backend is not None
        launch = self.launches.get(cmd.launch_id)
        record = self.records.get(cmd.launch_id)
        if launch is None or launch.exited or record is None or record.handle is None:
            return
        await self.record(cmd)
        assert self.rt is not None
        self.rt.spawn(self.backend.cancel(record.handle, cmd.grace_s), f"cancel:{cmd.launch_id}")

def _state_of(record: LaunchRecord) -> LaunchState:
    """A launch as its last record left it (a restarted launcher folds on from there)."""
    exit = record.exit
    return LaunchState(
        **record.launch_fields(), state=record.state,
        requested_at=record.requested_at, updated_at=record.requested_at,
        cancelled=record.cancelled, cancel_cause=record.cancel_cause,
        native_id=record.handle.native_id if record.handle else "",
        exit_code=exit.exit_code if exit else None, reason=exit.cause if exit else None,
        message=exit.message if exit else "")
