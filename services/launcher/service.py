"""The launcher: turns launch requests into workers through the site's backend, watches them,
cancels them, and after a restart reattaches to live workers and reports those that ended.

Launch records in KV `launches_<site>` make it idempotent: a launch id seen once is never
launched again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from cairn import subjects, telemetry
from cairn.bus import KV, Delivery, kv, objects
from cairn.errors import CairnError, InvalidInput, NotFound
from cairn.events import (
    SITE_DECODER,
    LaunchCancel,
    LaunchRequested,
    WorkerExited,
    WorkerLaunching,
    WorkerRunning,
    now,
)
from cairn.launcher.backends.base import Backend, LaunchHandle, LaunchSpec, WorkerExit, load_backend
from cairn.launcher.records import LaunchRecord, kv_key
from cairn.runtime.service import Runtime
from cairn.spec.site import SiteConfig, load_site_config

log = logging.getLogger("cairn.launcher")


class LauncherService:
    name: ClassVar[str] = "launcher"

    def __init__(self, config: Any) -> None:
        if not config.site_config:
            raise CairnError("the launcher needs --site-config (site.yaml)")
        self.config = config
        self.site_cfg: SiteConfig = load_site_config(config.site_config)
        self.site = self.site_cfg.site
        self.workdir = Path(self.site_cfg.workdir)
        self.backend: Backend | None = None
        self.records: dict[str, LaunchRecord] = {}
        self.watchers: dict[str, asyncio.Task[None]] = {}
        self._kv: KV[LaunchRecord] | None = None
        self._ready = False
        self.rt: Runtime | None = None

    @property
    def bus(self) -> Any:
        assert self.rt is not None
        return self.rt.bus

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        running = sum(1 for r in self.records.values() if r.state != "exited")
        return {"backend": self.site_cfg.backend, "workers": running}

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        rt.site = self.site
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Imported here, by name: a site loads only the backend it uses.
        options: dict[str, Any] = {"workdir": self.workdir}
        if self.site_cfg.backend == "process":
            options["warm"] = True  # Python workers start from a warm interpreter
        self.backend = load_backend(self.site_cfg.backend, **options)
        await rt.bus.ensure_site(self.site)
        self._kv = await kv(rt.bus, subjects.kv_launches(self.site), LaunchRecord)
        async for _, record in self._kv.items():
            self.records[record.launch_id] = record
        await self._reconcile()
        await rt.consume(stream=subjects.site_stream(self.site).name, durable="launcher",
                         filters=[subjects.site_launch_all(self.site)], decoder=SITE_DECODER,
                         handler=self._on_command)
        await rt.serve(subjects.site_logs(self.site), self._serve_logs)
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        for task in self.watchers.values():
            task.cancel()
        await asyncio.gather(*self.watchers.values(), return_exceptions=True)
        if self.backend is not None:
            await self.backend.close()

    # -- reconcile after a restart ----------------------------------------------------------

    async def _reconcile(self) -> None:
        assert self.backend is not None
        for record in list(self.records.values()):
            if record.state == "exited":
                continue
            if record.handle is None:
                # Crashed between writing the record and starting the worker.
                await self._report(record, WorkerExit(
                    launch_id=record.launch_id, exit_code=None, cause="infrastructure",
                    message="the launcher stopped while starting this worker", ended_at=now()))
                continue
            found = await self.backend.reattach(record.handle)
            if isinstance(found, WorkerExit):
                log.info("worker %s ended while the launcher was down", record.launch_id)
                await self._report(record, found)
            else:
                log.info("reattached to worker %s", record.launch_id)
                self._watch(record, found)

    # -- commands ---------------------------------------------------------------------------

    async def _on_command(self, event: Any, d: Delivery) -> None:
        match event:
            case LaunchRequested():
                await self._launch(event)
            case LaunchCancel():
                await self._cancel(event)

    async def _save(self, record: LaunchRecord) -> None:
        self.records[record.launch_id] = record
        assert self._kv is not None
        await self._kv.put(kv_key(record.launch_id), record)

    def _event_base(self, record: LaunchRecord, what: str) -> dict[str, Any]:
        return {"id": f"{record.launch_id}.{what}", "at": now(),
                "source": f"launcher@{self.site}", "study": record.study, "job": record.job,
                "site": self.site, "role": record.role, "rank": record.rank,
                "attempt": record.attempt, "launch_id": record.launch_id}

    async def _launch(self, req: LaunchRequested) -> None:
        assert self.backend is not None
        if req.launch_id in self.records:
            return  # seen before: a launch id is launched at most once
        record = LaunchRecord(launch_id=req.launch_id, study=req.study or "", job=req.job,
                              site=self.site, role=req.role, rank=req.rank,
                              attempt=req.attempt, requested_at=req.at)
        await self._save(record)
        await self.bus.publish(WorkerLaunching(**self._event_base(record, "launching"),
                                               backend=self.backend.name, cause=req.id))
        try:
            spec = await self._spec(req)
            handle = await self.backend.launch(spec)
        except CairnError as exc:
            await self._report(record, WorkerExit(launch_id=req.launch_id, exit_code=None,
                                                  cause="launch-failed", message=str(exc),
                                                  ended_at=now()))
            return
        record.state, record.handle = "running", handle
        await self._save(record)
        await self.bus.publish(WorkerRunning(**self._event_base(record, "running"),
                                             native_id=handle.native_id))
        self._watch(record, handle)

    async def _spec(self, req: LaunchRequested) -> LaunchSpec:
        code_dir = await self._bundle(req.study or "", req.code_digest)
        env = {
            "CAIRN_NATS_URL": self.site_cfg.worker_nats_url, "CAIRN_STUDY": req.study or "",
            "CAIRN_JOB": req.job, "CAIRN_SITE": self.site, "CAIRN_ROLE": req.role,
            "CAIRN_RANK": str(req.rank), "CAIRN_ATTEMPT": str(req.attempt),
            "CAIRN_PARAMS": json.dumps(req.params),
        }
        traceparent = telemetry.current_traceparent()
        if traceparent:
            env["TRACEPARENT"] = traceparent
        return LaunchSpec(
            launch_id=req.launch_id, job=req.job, study=req.study or "", site=self.site,
            role=req.role, rank=req.rank, attempt=req.attempt, entrypoint=req.entrypoint,
            code_dir=str(code_dir), env=env, study_env=dict(req.env),
            secret_env=resolve_secrets(req.secret_refs), datasets=dict(req.datasets),
            gpus=list(req.gpus), millicpus=req.resources.millicpus,
            memory_bytes=req.resources.memory_bytes, timeout_s=req.timeout_s or None,
            image=req.image or "", platform=dict(req.platform or {}))

    async def _bundle(self, study: str, digest: str | None) -> Path:
        """The unpacked code bundle, cached per digest."""
        if not digest:
            empty = self.workdir / "bundles" / "empty"
            empty.mkdir(parents=True, exist_ok=True)
            return empty
        dest = self.workdir / "bundles" / digest
        if (dest / ".complete").exists():
            return dest
        store = await objects(self.bus, subjects.obj_artifacts(study))
        try:
            data = await store.get(digest, digest=digest)
        except NotFound:
            raise InvalidInput(f"code bundle {digest[:12]} is not in artifacts_{study}") from None
        from cairn.codebundle import unpack

        tmp = dest.with_name(digest + f".tmp{os.getpid()}")
        await asyncio.to_thread(unpack, data, tmp)
        if not dest.exists():
            tmp.rename(dest)
        (dest / ".complete").touch()
        return dest

    def _watch(self, record: LaunchRecord, handle: LaunchHandle) -> None:
        self.watchers[record.launch_id] = asyncio.create_task(
            self._wait(record, handle), name=f"watch:{record.launch_id}")

    async def _wait(self, record: LaunchRecord, handle: LaunchHandle) -> None:
        assert self.backend is not None
        try:
            result = await self.backend.wait(handle)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("watching %s failed", record.launch_id)
            result = WorkerExit(launch_id=record.launch_id, exit_code=None,
                                cause="infrastructure", message=f"lost track: {exc}",
                                ended_at=now())
        await self._report(record, result)
        self.watchers.pop(record.launch_id, None)

    async def _report(self, record: LaunchRecord, result: WorkerExit) -> None:
        cause = result.cause
        if result.exit_code == 0:
            cause = None  # a clean exit is a clean exit, even after a cancel
        elif (record.cancelled and cause in ("crashed", None)
              and (result.exit_code is None or result.exit_code >= 128)):
            # Killed by a signal after we asked it to stop (the backend may not know, after a
            # restart): that is the cancel. A worker that failed on its own keeps its cause.
            cause = "cancelled"
        await self.bus.publish(WorkerExited(**self._event_base(record, "exited"),
                                            exit_code=result.exit_code, reason=cause,
                                            message=result.message))
        record.state, record.exit = "exited", result
        await self._save(record)

    async def _cancel(self, cmd: LaunchCancel) -> None:
        assert self.backend is not None
        record = self.records.get(cmd.launch_id)
        if record is None or record.state == "exited" or record.handle is None:
            return
        record.cancelled = True
        await self._save(record)
        handle = record.handle
        assert self.rt is not None
        self.rt.spawn(self.backend.cancel(handle, cmd.grace_s), f"cancel:{cmd.launch_id}")

    # -- logs -------------------------------------------------------------------------------

    async def _serve_logs(self, msg: Any) -> bytes:
        try:
            args = msgspec.json.decode(msg.data or b"{}", type=dict[str, Any])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InvalidInput(f"malformed logs request: {exc}") from None
        record = self.records.get(str(args.get("launch_id", "")))
        if record is None or record.handle is None:
            raise NotFound(f"no worker {args.get('launch_id')} at site {self.site}")
        offset = max(0, int(args.get("offset", 0)))
        limit = min(int(args.get("max_bytes", 256 * 1024)), 1024 * 1024)
        data = await asyncio.to_thread(_read_from, Path(record.handle.log_path), offset, limit)
        done = record.state == "exited" and len(data) < limit
        return msgspec.json.encode({"ok": True, "result": {
            "data_b64": base64.b64encode(data).decode(), "offset": offset + len(data),
            "done": done}})


def _read_from(path: Path, offset: int, limit: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def resolve_secrets(refs: dict[str, str]) -> dict[str, str]:
    """Resolve secret references on the site, at launch: `env:NAME` or `file:/path`."""
    out: dict[str, str] = {}
    for name, ref in refs.items():
        kind, _, where = ref.partition(":")
        if kind == "env":
            value = os.environ.get(where)
            if value is None:
                raise InvalidInput(f"secret {name}: the launcher's environment has no {where}",
                                   field=f"secret_env.{name}")
            out[name] = value
        elif kind == "file":
            try:
                out[name] = Path(where).read_text(encoding="utf-8").rstrip("\n")
            except OSError as exc:
                raise InvalidInput(f"secret {name}: cannot read {where}: {exc.strerror}",
                                   field=f"secret_env.{name}") from None
        else:
            raise InvalidInput(f"secret {name}: {kind!r} secrets need the kubernetes backend",
                               field=f"secret_env.{name}")
    return out
