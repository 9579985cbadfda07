"""The launcher's backend seam: what a backend is asked, what it answers, and how one is loaded.

A backend turns a `LaunchSpec` into a running worker (a local process, a container, a pod, a
batch job), watches it, cancels it, and after a launcher restart finds it again. It has no bus
dependency: the launcher service turns its answers into events.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from cairn.errors import InvalidInput
from cairn.events.launch import DatasetMount
from cairn.events.workerref import WorkerLaunch, make_launch_id

__all__ = [
    "BACKENDS",
    "Backend",
    "Capability",
    "DatasetMount",
    "ExitCause",
    "LaunchHandle",
    "LaunchSpec",
    "WorkerExit",
    "allocation_env",
    "capability_names",
    "load_backend",
    "make_launch_id",
]


class Capability(enum.Flag):
    """What a backend can do; the launcher and agent refuse what a site's backend cannot."""

    GPU = enum.auto()
    MULTI_NODE = enum.auto()
    CONTAINERS = enum.auto()
    CANCEL = enum.auto()
    RECONCILE = enum.auto()
    MEMORY_LIMIT = enum.auto()
    CPU_AFFINITY = enum.auto()


def capability_names(capabilities: Capability) -> list[str]:
    """The names a launcher declares (`site.backend`): `gpu`, `multi-node`, `containers`..."""
    return sorted((flag.name or "").lower().replace("_", "-") for flag in Capability
                  if flag in capabilities)


# The part of JOBSPEC's closed cause set that a backend can observe about one worker.
ExitCause = Literal["crashed", "oom", "timeout", "cancelled", "launch-failed", "infrastructure",
                    "unschedulable", "allocation-mismatch", "image-not-approved", "site-policy"]


class LaunchSpec(WorkerLaunch, frozen=True, kw_only=True):
    """Everything a backend needs to start one worker; secrets already resolved.

    Its key (`WorkerLaunch`): the launch id (the idempotency key and the workdir name), the
    study, and the worker's job, site (this one), role, rank and attempt.

    Attributes:
        entrypoint: A command string (split with `shlex`, no shell) or an argv list.
            `python` resolves to the interpreter running the launcher.
        code_dir: An unpacked code bundle; it becomes the top level of the working directory.
        env: The worker environment contract (`CAIRN_*`, `TRACEPARENT`), computed by the
            caller. The backend overrides `CAIRN_WORKDIR` and `CAIRN_DATA` with real paths.
        study_env: The study's plain env from `study_runtime.yaml`; it never shadows `env`.
        secret_env: Resolved secret values; never written to disk by a backend, masked in
            `repr`. Do not persist or publish a `LaunchSpec`: record the `LaunchHandle`.
        datasets: Dataset name -> mount; exposed as `$CAIRN_DATA/<name>`.
        gpus: Device ids to expose; every other GPU is hidden.
        cpus: CPU ids to pin to; None lets the backend pick `ceil(millicpus / 1000)`.
        millicpus: CPU request in thousandths of a CPU; 0 means no pinning.
        memory_bytes: Memory limit; 0 means none.
        timeout_s: Wall-clock limit from start; None means none.
        image: The container image (container backends; the process backend ignores it).
        nodes: Nodes the worker spans, one task per node (backends with MULTI_NODE); its
            `gpus` are per node there.
        platform: The study's settings for this site's backend, from study_runtime.yaml
            (`{"docker": {...}}`, `{"kubernetes": {...}}`, `{"slurm": {...}}`).
        secret_refs: Secret references the backend resolves itself, unread by the launcher
            (`k8s:<secret>/<key>` on the kubernetes backend: mounted, never read).
        gpus_requested: GPUs the job asked for (per node), which the worker proves it got
            (`allocation_env`); None: as many as `gpus` lists.
        trusted_code: The site's study_runtime.yaml marks the study's code as trusted
            (`trusted_code: true`): a process backend that cannot isolate workers from the
            site runs it all the same, and refuses every other study.
    """

    entrypoint: str | list[str]
    code_dir: str
    env: dict[str, str] = {}
    study_env: dict[str, str] = {}
    secret_env: dict[str, str] = {}
    datasets: dict[str, DatasetMount] = {}
    gpus: list[str] = []
    cpus: list[int] | None = None
    millicpus: int = 0
    memory_bytes: int = 0
    timeout_s: float | None = None
    image: str = ""
    platform: dict[str, Any] = {}
    secret_refs: dict[str, str] = {}
    nodes: int = 1
    gpus_requested: int | None = None
    trusted_code: bool = False

    @property
    def gpus_asked(self) -> int:
        """GPUs the job asked for (per node): `gpus_requested`, else as many as granted."""
        return len(self.gpus) if self.gpus_requested is None else self.gpus_requested

    def __repr__(self) -> str:
        # Specs end up in logs and tracebacks; secret values must not.
        masked = {key: "***" for key in self.secret_env}
        fields = ", ".join(
            f"{name}={masked if name == 'secret_env' else getattr(self, name)!r}"
            for name in self.__struct_fields__
        )
        return f"LaunchSpec({fields})"


def allocation_env(spec: LaunchSpec, cpus: list[int],
                   gpu_ids: list[str] | None = None) -> dict[str, str]:
    """`CAIRN_ALLOCATION` for the worker: what the site allocated, which the worker compares
    with what it can see before the job's code runs (`cairn.worker.allocation`; a GPU
    mismatch ends it with exit 78, reported as cause `allocation-mismatch`).

    Args:
        spec: The launch; its `gpus_asked` is the request.
        cpus: The CPUs it is pinned to (empty: not pinned).
        gpu_ids: The device ids it was given; default `spec.gpus`. Pass `[]` where the
            platform picks them (Slurm), so only their count is checked.
    """
    from cairn.worker.allocation import ENV, encode

    ids = spec.gpus if gpu_ids is None else gpu_ids
    return {ENV: encode(spec.gpus_asked, ids, cpus, spec.memory_bytes)}


class LaunchHandle(msgspec.Struct, frozen=True, kw_only=True):
    """A started worker, as the launcher records it to find it again after a restart.

    Attributes:
        launch_id: The spec's launch id.
        backend: Name of the backend that started it.
        native_id: The backend's own id: a pid, a container id, a pod name, a Slurm job id.
        workdir: The worker's working directory.
        log_path: Where the worker's stdout and stderr are captured.
        started_at: UTC time the worker was started.
        start_ticks: Process start time in clock ticks since boot (`/proc/<pid>/stat` field
            22), to tell our worker from a later process that reuses its pid; process backend.
        memory_limit: The mechanism that holds the memory limit: `cgroup-v2`, `cgroup-v1`,
            `rlimit-as` or `none`.
        cgroup: The worker's cgroup directory, where one was made.
        cpus: CPU ids the worker is pinned to; empty when not pinned.
        timeout_s: The spec's timeout, so a restarted launcher still enforces it.
    """

    launch_id: str
    backend: str
    native_id: str
    workdir: str
    log_path: str
    started_at: datetime
    start_ticks: int | None = None
    memory_limit: str = "none"
    cgroup: str | None = None
    cpus: list[int] = []
    timeout_s: float | None = None


class WorkerExit(msgspec.Struct, frozen=True, kw_only=True):
    """How a worker ended.

    Attributes:
        launch_id: The spec's launch id.
        exit_code: The worker's exit code; `128 + signal` when a signal killed it; None when
            it is not known (it never started, or it ended unobserved without a record).
        cause: None for exit 0, else one of `ExitCause`.
        message: For people: what happened, and what held the limits.
        ended_at: UTC time the backend saw it end.
    """

    launch_id: str
    exit_code: int | None
    cause: ExitCause | None
    message: str = ""
    ended_at: datetime


@runtime_checkable
class Backend(Protocol):
    """One way to run workers. Every wait in an implementation is bounded."""

    name: str
    capabilities: Capability

    async def launch(self, spec: LaunchSpec) -> LaunchHandle:
        """Start a worker. Raises `LaunchFailed` when it could not be started."""
        ...

    async def wait(self, handle: LaunchHandle) -> WorkerExit:
        """Wait for the worker to end; enforce its timeout; classify how it ended."""
        ...

    async def cancel(self, handle: LaunchHandle, grace_s: float) -> None:
        """Ask the worker to stop, force it after `grace_s`; returns once it is gone."""
        ...

    async def reattach(self, handle: LaunchHandle) -> LaunchHandle | WorkerExit:
        """After a launcher restart: the handle if it still runs (then `wait` works), else
        how it ended while the launcher was down."""
        ...

    def logs(self, handle: LaunchHandle, *, follow: bool = False) -> AsyncIterator[bytes]:
        """The worker's captured output, in chunks; with `follow`, until the worker ends."""
        ...

    async def close(self) -> None:
        """Stop watching (workers keep running: a restarted launcher reattaches)."""
        ...


# Name -> "module:class"; imported only when asked for, so a site that runs Slurm never
# needs the Docker or Kubernetes client libraries installed.
BACKENDS: dict[str, str] = {
    "process": "cairn.launcher.backends.process:ProcessBackend",
    "docker": "cairn.launcher.backends.docker:DockerBackend",
    "kubernetes": "cairn.launcher.backends.kubernetes:KubernetesBackend",
    "slurm": "cairn.launcher.backends.slurm:SlurmBackend",
}


def load_backend(name: str, **options: Any) -> Backend:
    """Build the backend a site config names.

    Raises:
        InvalidInput: unknown name, a backend not available in this build, or bad options.
    """
    target = BACKENDS.get(name)
    if target is None:
        raise InvalidInput(
            f"unknown backend {name!r}: use one of {', '.join(sorted(BACKENDS))}", field="backend"
        )
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Our own module missing means "not built yet"; a missing dependency inside it is
        # named, so the operator knows what to install.
        if exc.name == module_name:
            what = "is not available in this build yet"
        else:
            what = f"needs the Python package {exc.name!r} installed"
        raise InvalidInput(f"backend {name!r} {what}", field="backend") from exc
    cls = getattr(module, class_name)
    try:
        backend: Backend = cls(**options)
    except TypeError as exc:
        raise InvalidInput(f"bad options for backend {name!r}: {exc}", field="backend") from exc
    return backend
