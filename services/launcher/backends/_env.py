"""A worker's environment, built once for every backend.

The contract (DESIGN.md, `cairn.worker.sdk`): `CAIRN_NATS_URL`, `CAIRN_STUDY`, `CAIRN_JOB`,
`CAIRN_SITE`, `CAIRN_ROLE`, `CAIRN_RANK`, `CAIRN_ATTEMPT`, `CAIRN_PARAMS` (`contract_env`,
when the launcher turns a request into a `LaunchSpec`), then, from the backend,
`CAIRN_WORKDIR`, `CAIRN_DATA`, `CAIRN_ALLOCATION`, `<NAME>_FILE` per secret and the GPU
variables (`worker_environment`).

Layers, later ones win: what the platform starts a process with, the study's env
(study_runtime.yaml), the contract, and the platform's own facts (paths, where the secrets
are, GPUs, what was allocated): a study env can never shadow `CAIRN_*` or show a worker GPUs
it was not given. A backend differs from another only in `WorkerPlatform`, where its
platform really differs.

GPU visibility, one set of rules:

- `CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES` and the span spool are Cairn's to set: a
  study env's are dropped.
- A worker given no GPU gets `CUDA_VISIBLE_DEVICES=""` (empty, not unset: unset means every
  GPU to CUDA) and `NVIDIA_VISIBLE_DEVICES=void` (a container runtime that is NVIDIA's by
  default would otherwise expose every GPU its image names: CUDA images say `all`).
- A worker given GPUs: where it sees the host's devices (a local process) it is told their
  ids; where the platform exposes only its own GPUs (a container runtime, a device plugin,
  Slurm's GRES), the platform sets what it sees and `CUDA_VISIBLE_DEVICES` is left unset
  (host ids would not exist there, and Slurm sets its own when the job starts).
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn import tracespool
from cairn.events import WorkerRef
from cairn.launcher.backends.base import LaunchSpec, allocation_env

CAIRN_OWNED = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", tracespool.SPOOL_ENV)
"""Variables only Cairn sets (see the module docstring)."""


def contract_env(ref: WorkerRef, *, study: str, nats_url: str,
                 params: Mapping[str, Any]) -> dict[str, str]:
    """The `CAIRN_*` variables that say which worker this is and where its bus is."""
    return {
        "CAIRN_NATS_URL": nats_url, "CAIRN_STUDY": study, "CAIRN_JOB": ref.job,
        "CAIRN_SITE": ref.site, "CAIRN_ROLE": ref.role, "CAIRN_RANK": str(ref.rank),
        "CAIRN_ATTEMPT": str(ref.attempt), "CAIRN_PARAMS": json.dumps(dict(params)),
    }


class GpuIds(enum.Enum):
    """Who picks a worker's GPU devices, and so what its environment says of them."""

    HOST = "host"
    """The site's agent picked them and the worker sees every device of the host (a local
    process): `CUDA_VISIBLE_DEVICES` names the picked ids."""
    RUNTIME = "runtime"
    """The agent picked them and a container runtime exposes only those, renumbered
    (Docker's `--gpus device=...`)."""
    PLATFORM = "platform"
    """The platform picks them when the worker starts (a Kubernetes device plugin, Slurm's
    GRES): only their count is known here."""


@dataclass(frozen=True)
class WorkerPlatform:
    """Where a backend's worker runs, as its environment must say it.

    Attributes:
        workdir: `CAIRN_WORKDIR` as the worker sees it.
        data: `CAIRN_DATA` as the worker sees it.
        secrets: The folder of the worker's secret files as it sees it.
        gpu_ids: Who picks its GPUs.
        start: What a process starts with on this platform: a container has its image's
            env, a host process needs PATH, HOME and LANG (`host_start_env`).
        cpus: The CPUs it is pinned to (empty: not pinned, or the platform's choice).
        spool: Where the worker spools its spans for the launcher to forward, on a backend
            that forwards them (with an OTLP endpoint only); None: the worker exports itself.
        facts: Anything else the platform must say last (a sandboxed process's HOME).
    """

    workdir: str
    data: str
    secrets: str
    gpu_ids: GpuIds
    start: Mapping[str, str] = field(default_factory=lambda: {"PYTHONUNBUFFERED": "1"})
    cpus: Sequence[int] = ()
    spool: str | None = None
    facts: Mapping[str, str] = field(default_factory=dict)


def host_start_env(python: str, home: str) -> dict[str, str]:
    """What a worker running as a host process starts from (and the warm interpreter)."""
    return {
        # Our interpreter's bin dir first: `python` in an entrypoint is the launcher's Python.
        "PATH": os.pathsep.join([str(Path(python).parent), os.environ.get("PATH", os.defpath)]),
        "HOME": os.environ.get("HOME", home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",  # so worker.log is live, not flushed at exit
    }


def secret_file_env(spec: LaunchSpec, folder: str) -> dict[str, str]:
    """What the worker learns of its secrets: `<NAME>_FILE`, the path of each value's file
    as the worker sees it; never the value (so never in `ps e`, `docker inspect`, a pod).
    Secrets the platform mounts itself (`secret_refs`: Kubernetes Secrets) are files too."""
    return {f"{name}_FILE": f"{folder}/{name}"
            for name in sorted({*spec.secret_env, *spec.secret_refs})}


def worker_environment(spec: LaunchSpec, platform: WorkerPlatform) -> dict[str, str]:
    """The worker's whole environment: nothing of the launcher's leaks but what
    `platform.start` holds."""
    env = dict(platform.start)
    env.update({k: v for k, v in spec.study_env.items() if k not in CAIRN_OWNED})
    env.update({k: v for k, v in spec.env.items() if k not in CAIRN_OWNED})
    env["CAIRN_WORKDIR"] = platform.workdir
    env["CAIRN_DATA"] = platform.data
    env.update(secret_file_env(spec, platform.secrets))
    env.update(gpu_env(spec, platform.gpu_ids))
    picked: list[str] | None = [] if platform.gpu_ids is GpuIds.PLATFORM else None
    env.update(allocation_env(spec, list(platform.cpus), gpu_ids=picked))
    if platform.spool is not None and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        env[tracespool.SPOOL_ENV] = platform.spool
    env.update(platform.facts)
    return env


def gpu_env(spec: LaunchSpec, gpu_ids: GpuIds) -> dict[str, str]:
    """The GPU variables of the module docstring's rules."""
    given = spec.gpus_asked > 0 if gpu_ids is GpuIds.PLATFORM else bool(spec.gpus)
    if not given:
        return {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void"}
    if gpu_ids is GpuIds.HOST:
        return {"CUDA_VISIBLE_DEVICES": ",".join(spec.gpus)}
    return {}
