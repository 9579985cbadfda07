"""The `docker` backend: each worker is a container on this host's Docker Engine.

    site.yaml: backend: docker        launcher env: DOCKER_HOST (default: the local socket)

A worker's container:

- runs the study's image (`images.default` in study_runtime.yaml, or the job's approved
  `image`), with the job's entrypoint as its whole command line (the image's ENTRYPOINT is
  replaced), in `/cairn/work`: the working directory on the host, code bundle copied in;
- sees each dataset at `/cairn/data/<name>`, bind-mounted with its `mode` (here `ro` holds);
- gets the worker contract (`CAIRN_WORKDIR=/cairn/work`, `CAIRN_DATA=/cairn/data`,
  `CAIRN_ALLOCATION`), the study's env, and nothing of the launcher's environment;
- gets each secret as a file, never an env value (so never in `docker inspect`): 0400 files
  in a 0700 host tmpfs folder (`/dev/shm/cairn-secrets/<container>/`) mounted read-only at
  `/cairn/secrets`, named by `<NAME>_FILE`, deleted when the container ends;
- is limited by the engine: `--memory` (no swap beyond it), `--cpus` and `--cpuset-cpus`, and
  the granted GPUs (`--gpus device=...`, which needs the NVIDIA container toolkit; the
  container sees only those, so `CUDA_VISIBLE_DEVICES` is left unset, and is empty without);
- takes `network` (default: the engine's), `shm_size`, `user` and `runtime` (`nvidia` where
  the engine needs it named for GPUs) from the study's `docker:` settings;
- is labelled `cairn.launch=<launch id>` and named after it, so a restarted launcher finds it.

An image pinned by digest (`...@sha256:<hex>`) runs only if the local image is that content
(`_docker_image.py`); else it is refused with cause `image-not-approved`.

When it ends, its output is copied to `worker.log`, its state read (exit code, `OOMKilled`),
and the container removed. Cancel is `docker stop` (SIGTERM, SIGKILL after the grace period).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.types import DeviceRequest

from cairn import tracespool
from cairn.errors import Conflict, InvalidInput
from cairn.launcher.backends._cpus import pick_cpus
from cairn.launcher.backends._docker_image import approved_image
from cairn.launcher.backends._env import GpuIds, WorkerPlatform, worker_environment
from cairn.launcher.backends._exitcause import Observed, classify
from cairn.launcher.backends._watching import (
    already_known,
    find_watch,
    stop_watching,
    stream_log,
    wait_stopped,
    wait_watched,
)
from cairn.launcher.backends._workdir import (
    CONTROL_DIR,
    LOG_NAME,
    dir_name,
    numeric_owner,
    prepare_workdir,
    read_allocation_mismatch,
    read_chunk,
    read_tail,
    remove_secrets,
    split_entrypoint,
    write_secrets,
)
from cairn.launcher.backends.base import (
    Capability,
    ExitCause,
    LaunchHandle,
    LaunchSpec,
    WorkerExit,
)
from cairn.launcher.backends.errors import LaunchFailed
from cairn.worker.allocation import MISMATCH_EXIT

__all__ = ["DockerBackend"]

WORKDIR = "/cairn/work"
DATA = "/cairn/data"
SECRETS = "/cairn/secrets"
LABEL = "cairn.launch"
# study_runtime.yaml `docker:` keys -> `docker run` options.
SETTINGS = {"network": "network_mode", "shm_size": "shm_size", "user": "user",
            "runtime": "runtime"}
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class _Watch:
    handle: LaunchHandle
    deadline: float | None
    cancelled: bool = False
    timed_out: bool = False
    task: asyncio.Task[WorkerExit] | None = None
    stopper: asyncio.Task[None] | None = None  # the `docker stop` of a timeout


def container_name(launch_id: str) -> str:
    return "cairn-" + _NAME_CHARS.sub("-", dir_name(launch_id))


class DockerBackend:
    """Workers as containers.

    Args:
        workdir: The site workdir; working directories go under `<workdir>/workers/`.
        grace_s: Time between SIGTERM and SIGKILL when a timeout stops a worker.
        docker_host: The engine's URL; default `DOCKER_HOST`, else the local socket.
        poll_s: How often a watch looks at its container.
        secrets_root: Host folder for the secret files (default `/dev/shm/cairn-secrets`, a
            tmpfs, else `<workdir>/secrets`).
    """

    name = "docker"
    spools_traces = True  # its workers write cairn.tracespool.spool_path(workdir)

    def __init__(self, workdir: str | Path, *, grace_s: float = 10.0,
                 docker_host: str | None = None, poll_s: float = 0.25,
                 secrets_root: str | Path | None = None) -> None:
        self.root = Path(workdir)
        shm = Path("/dev/shm")
        self.secrets_root = Path(secrets_root) if secrets_root else (
            shm / "cairn-secrets" if shm.is_dir() else self.root / "secrets")
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.base_url = (docker_host or os.environ.get("DOCKER_HOST")
                         or "unix:///var/run/docker.sock")
        self._client: Any = None
        self.capabilities = (Capability.CONTAINERS | Capability.GPU | Capability.CANCEL
                             | Capability.RECONCILE | Capability.MEMORY_LIMIT
                             | Capability.CPU_AFFINITY)
        self._watches: dict[str, _Watch] = {}
        self._ended: dict[str, WorkerExit] = {}
        self._cpu_load: Counter[int] = Counter()

    # -- the Backend protocol -------------------------------------------------------------

    async def launch(self, spec: LaunchSpec) -> LaunchHandle:
        """Prepare the working directory and start the container.

        Raises:
            InvalidInput: no image, a bad entrypoint or docker setting, CPUs not ours.
            Conflict: this launch id was launched before (reattach instead).
            LaunchFailed: missing code, dataset or image; the engine refused the container.
        """
        if not spec.image:
            raise InvalidInput("the docker backend needs an image: set images.default for the "
                               "study in study_runtime.yaml, or image in the job spec",
                               field="image")
        argv = split_entrypoint(spec.entrypoint)
        cpus = pick_cpus(spec, self._cpu_load)
        workdir = await asyncio.to_thread(prepare_workdir, spec, self.root)
        try:
            container = await asyncio.to_thread(self._run, spec, argv, cpus, workdir)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, workdir, True)
            await asyncio.to_thread(remove_secrets, self._secrets_dir(spec.launch_id))
            raise
        handle = LaunchHandle(
            launch_id=spec.launch_id, backend=self.name, native_id=container.id,
            workdir=str(workdir), log_path=str(workdir / LOG_NAME),
            started_at=datetime.now(UTC), memory_limit="docker" if spec.memory_bytes else "none",
            cpus=cpus, timeout_s=spec.timeout_s)
        self._start_watch(handle)
        return handle

    async def wait(self, handle: LaunchHandle) -> WorkerExit:
        """Wait for the container to end (bounded by its timeout) and say how it ended."""
        return await wait_watched(self, handle)

    async def cancel(self, handle: LaunchHandle, grace_s: float) -> None:
        """`docker stop`: SIGTERM, SIGKILL after `grace_s`; returns once it is gone."""
        watch = await find_watch(self, handle)
        if isinstance(watch, WorkerExit):
            return
        watch.cancelled = True
        await self._stop(handle, grace_s)
        assert watch.task is not None
        await wait_stopped(watch.task, grace_s + 30.0)

    async def reattach(self, handle: LaunchHandle) -> LaunchHandle | WorkerExit:
        """Find a container again after a launcher restart: the handle while it runs, else
        how it ended (from the engine, or lost when the container is gone)."""
        known = already_known(self, handle)
        if known is not None:
            return known
        state = await asyncio.to_thread(self._state, handle.native_id)
        if state is None or not state.get("Running", False):
            return await self._finish(_Watch(handle=handle, deadline=None), state)
        self._start_watch(handle)
        return handle

    async def find(self, launch_id: str) -> LaunchHandle | None:
        """The container a launcher started for `launch_id` but never recorded (it died in
        between), found by its `cairn.launch` label; None when there is none."""
        found = await asyncio.to_thread(self._labelled, launch_id)
        if found is None:
            return None
        workdir = self.root / "workers" / dir_name(launch_id)
        cpuset = str((found.attrs.get("HostConfig") or {}).get("CpusetCpus") or "")
        return LaunchHandle(launch_id=launch_id, backend=self.name, native_id=found.id,
                            workdir=str(workdir), log_path=str(workdir / LOG_NAME),
                            started_at=datetime.now(UTC),
                            cpus=[int(c) for c in cpuset.split(",") if c.isdigit()])

    def _labelled(self, launch_id: str) -> Any:
        listed = self.client.containers.list(all=True, filters={"label": f"{LABEL}={launch_id}"})
        # Checked here too: the filter is the engine's, the ownership claim is ours.
        return next((c for c in listed if (c.labels or {}).get(LABEL) == launch_id), None)

    async def logs(self, handle: LaunchHandle, *, follow: bool = False) -> AsyncIterator[bytes]:
        """Its stdout and stderr: from the engine while it runs, from `worker.log` after."""
        def read(offset: int) -> Awaitable[bytes]:
            if handle.launch_id in self._watches:
                return asyncio.to_thread(lambda: self._logs(handle.native_id)[offset:])
            return asyncio.to_thread(read_chunk, Path(handle.log_path), offset)

        async for chunk in stream_log(read, lambda: handle.launch_id in self._watches,
                                      follow=follow, poll_s=self.poll_s):
            yield chunk

    async def close(self) -> None:
        """Stop watching; the containers keep running, for a restarted launcher to find."""
        await stop_watching(self._watches)
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None

    # -- internals ------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The engine's client, made on first use (from a worker thread: it may block).

        Raises:
            LaunchFailed: the engine cannot be reached.
        """
        if self._client is None:
            try:
                self._client = docker.DockerClient(base_url=self.base_url, timeout=60)
            except docker.errors.DockerException as exc:
                raise LaunchFailed(f"the Docker Engine at {self.base_url} cannot be reached: "
                                   f"{exc}") from exc
        return self._client

    def _run(self, spec: LaunchSpec, argv: list[str], cpus: list[int], workdir: Path) -> Any:
        settings = {k: v for k, v in dict(spec.platform.get("docker") or {}).items()
                    if v is not None}
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise InvalidInput(f"docker settings {unknown}: this backend knows "
                               f"{', '.join(SETTINGS)}", field="docker")
        image = approved_image(self.client, spec.image)
        volumes = {str(workdir): {"bind": WORKDIR, "mode": "rw"}}
        for name, mount in spec.datasets.items():
            volumes[str(Path(mount.source).resolve())] = {"bind": f"{DATA}/{dir_name(name)}",
                                                          "mode": mount.mode}
        if spec.secret_env:
            folder = self._secrets_dir(spec.launch_id)
            try:
                write_secrets(spec, folder, numeric_owner(settings.get("user")))
            except OSError as exc:
                raise LaunchFailed(f"cannot write the worker's secrets in {folder}: "
                                   f"{exc.strerror}") from exc
            volumes[str(folder)] = {"bind": SECRETS, "mode": "ro"}
        environment = _env(spec, cpus)
        options: dict[str, Any] = {
            "name": container_name(spec.launch_id), "entrypoint": argv, "working_dir": WORKDIR,
            "environment": environment, "volumes": volumes, "detach": True,
            "labels": {LABEL: spec.launch_id, "cairn.job": spec.job, "cairn.site": spec.site,
                       "cairn.role": spec.role},
            "stdin_open": False, "tty": False,
        }
        for key, option in SETTINGS.items():
            if settings.get(key):
                options[option] = str(settings[key])
        if spec.memory_bytes:
            options["mem_limit"] = spec.memory_bytes
            options["memswap_limit"] = spec.memory_bytes  # no swap beyond the limit
        if spec.millicpus:
            options["nano_cpus"] = spec.millicpus * 1_000_000
        if cpus:
            options["cpuset_cpus"] = ",".join(str(c) for c in cpus)
        if spec.gpus:
            options["device_requests"] = [DeviceRequest(device_ids=list(spec.gpus),
                                                        capabilities=[["gpu"]])]
        try:
            return self.client.containers.run(image, **options)
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise Conflict(f"container {options['name']} exists: launch {spec.launch_id} "
                               "was started before", field="launch_id") from None
            # Created but not started (a program not in the image, a bad setting): leave no
            # container behind, so the same launch id can be tried again.
            self._remove(options["name"])
            raise LaunchFailed(f"the Docker Engine refused the worker: "
                               f"{exc.explanation or exc}") from exc

    def _secrets_dir(self, launch_id: str) -> Path:
        return self.secrets_root / container_name(launch_id)

    def _state(self, container_id: str) -> dict[str, Any] | None:
        try:
            container = self.client.containers.get(container_id)
        except docker.errors.NotFound:
            return None
        return dict(container.attrs.get("State") or {})

    def _logs(self, container_id: str) -> bytes:
        try:
            data: bytes = self.client.containers.get(container_id).logs(stdout=True,
                                                                        stderr=True)
        except docker.errors.APIError:
            return b""  # gone, or being removed: its output is in worker.log by then
        return data

    def _start_watch(self, handle: LaunchHandle) -> None:
        deadline = None
        if handle.timeout_s is not None:
            elapsed = (datetime.now(UTC) - handle.started_at).total_seconds()
            deadline = asyncio.get_running_loop().time() + handle.timeout_s - elapsed
        watch = _Watch(handle=handle, deadline=deadline)
        self._watches[handle.launch_id] = watch
        self._cpu_load.update(handle.cpus)
        watch.task = asyncio.create_task(self._watch(watch), name=f"watch {handle.launch_id}")

    async def _watch(self, watch: _Watch) -> WorkerExit:
        loop = asyncio.get_running_loop()
        while True:
            state = await asyncio.to_thread(self._state, watch.handle.native_id)
            if state is None or not state.get("Running", False):
                return await self._finish(watch, state)
            if (watch.deadline is not None and loop.time() >= watch.deadline
                    and not (watch.timed_out or watch.cancelled)):
                watch.timed_out = True
                watch.stopper = asyncio.create_task(self._stop(watch.handle, self.grace_s))
            await asyncio.sleep(self.poll_s)

    async def _stop(self, handle: LaunchHandle, grace_s: float) -> None:
        def stop() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.containers.get(handle.native_id).stop(timeout=max(0, round(grace_s)))

        await asyncio.to_thread(stop)

    async def _finish(self, watch: _Watch, state: dict[str, Any] | None) -> WorkerExit:
        handle = watch.handle
        record = Path(handle.workdir) / CONTROL_DIR / "container.json"
        if state is not None:
            data = await asyncio.to_thread(self._logs, handle.native_id)
            await asyncio.to_thread(Path(handle.log_path).write_bytes, data)
            # Kept before the container goes: a launcher that dies right after still knows.
            kept = {k: state.get(k) for k in ("ExitCode", "OOMKilled", "Error")}
            await asyncio.to_thread(record.write_text, json.dumps(kept))
            await asyncio.to_thread(self._remove, handle.native_id)
        else:
            with contextlib.suppress(OSError, ValueError):
                state = dict(json.loads(await asyncio.to_thread(record.read_text)))
        await asyncio.to_thread(remove_secrets, self._secrets_dir(handle.launch_id))
        code: int | None
        cause: ExitCause | None
        if state is None:
            code, cause = None, "infrastructure"
            message = "its container is gone: it ended while the launcher was down and was removed"
        else:
            tail = await asyncio.to_thread(read_tail, handle.log_path)
            status = int(state.get("ExitCode") or 0)
            mismatch = None
            if status == MISMATCH_EXIT:
                mismatch = await asyncio.to_thread(read_allocation_mismatch, handle.workdir)
            code, cause, message = classify(Observed(
                status_code=status, cancelled=watch.cancelled,
                timed_out=watch.timed_out, timeout_s=handle.timeout_s,
                oom_kills=1 if state.get("OOMKilled") else 0, log_tail=tail,
                memory_limit="docker --memory", allocation_mismatch=mismatch))
            if state.get("Error"):
                code, cause, message = None, "launch-failed", str(state["Error"])
        ended = WorkerExit(launch_id=handle.launch_id, exit_code=code, cause=cause,
                           message=message, ended_at=datetime.now(UTC))
        self._ended[handle.launch_id] = ended
        if self._watches.pop(handle.launch_id, None) is not None:
            self._cpu_load.subtract(handle.cpus)
        return ended

    def _remove(self, container_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.client.containers.get(container_id).remove(force=True)


def _env(spec: LaunchSpec, cpus: list[int]) -> dict[str, str]:
    """The container's environment: its image's, then the worker's (`_env.py`). Paths are
    the container's; secret values are files (`/cairn/secrets`), never here; the runtime
    exposes the granted GPUs only; the launcher sends the worker's spans (the collector's
    address may mean nothing inside the container: see cairn.tracespool)."""
    return worker_environment(spec, WorkerPlatform(
        workdir=WORKDIR, data=DATA, secrets=SECRETS, gpu_ids=GpuIds.RUNTIME, cpus=cpus,
        spool=f"{WORKDIR}/{tracespool.SPOOL_NAME}"))
