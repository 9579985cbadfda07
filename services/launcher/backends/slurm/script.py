"""What Cairn asks Slurm for one worker: the job request and its batch script. Pure.

One `JobRequest` is built from the `LaunchSpec` and the study's `slurm:` settings; the CLI
driver renders it as `#SBATCH` lines (`sbatch_options`), the REST driver as job properties
(`rest_properties`): slurmrestd does not read `#SBATCH` lines, so both come from one place.

The script body runs the worker:

- one node, sandbox `none`: the entrypoint is exec'd in the batch step (no srun step start);
- several nodes, or a container sandbox: one `srun` task per node (`--ntasks-per-node=1`),
  every task with `RANK`/`CAIRN_NODE_RANK` (its node index), `WORLD_SIZE`/`CAIRN_NODE_COUNT`,
  and `MASTER_ADDR` (the batch host, which holds rank 0) and `MASTER_PORT` (from the job id);
- every task first checks it sees exactly the GPUs it asked for on its node, and exits 78
  (the worker SDK's allocation-mismatch exit) with a message otherwise: a step given 1 GPU
  of 4 on a node (FLARE #5268) never trains silently on less. GPUs are asked per node
  (`--gpus-per-node`), so every node gets them;
- `CUDA_VISIBLE_DEVICES` is set empty where Slurm set nothing: unset means "every GPU".
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

import msgspec

from cairn.errors import InvalidInput
from cairn.launcher.backends.base import LaunchSpec
from cairn.spec.runtime import SlurmPolicy
from cairn.worker.allocation import MISMATCH_EXIT

TAG_PREFIX = "cairn:"
MASTER_PORT_BASE = 29500
_TIME = re.compile(r"^(?:\d+-\d+(?::\d+){0,2}|\d+(?::\d+){0,2})$")


class JobRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One batch job, as Cairn asks for it (see the module docstring).

    Attributes:
        name: Job name (`cairn-<job>-<role>-<rank>`).
        comment: The ownership tag, `cairn:<launch id>`.
        workdir: Working directory of the batch script, on the cluster's shared filesystem.
        output: stdout and stderr of the whole job.
        time_minutes: `--time`; None leaves the partition's default.
        nodes: `--nodes`.
        cpus_per_task: `--cpus-per-task`; 0 leaves Slurm's default.
        memory_mb: `--mem`, per node; 0 leaves `DefMemPerCPU`.
        gpus_per_node: `--gpus-per-node`.
        partition, account, qos, constraint, reservation: From study_runtime.yaml.
        env: The job's whole environment (the worker contract included).
        script: The batch script.
    """

    name: str
    comment: str
    workdir: str
    output: str
    time_minutes: int | None = None
    nodes: int = 1
    cpus_per_task: int = 0
    memory_mb: int = 0
    gpus_per_node: int = 0
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    reservation: str | None = None
    env: dict[str, str] = {}
    script: str = ""

    def __repr__(self) -> str:
        # The env holds resolved secrets: never in logs or tracebacks.
        return f"JobRequest(name={self.name!r}, comment={self.comment!r}, nodes={self.nodes})"


def settings_of(spec: LaunchSpec) -> SlurmPolicy:
    """The study's `slurm:` settings the launch request carried (already checked by the agent's
    loader; checked again, since a request is input).

    Raises:
        InvalidInput: an unknown key or a wrong type, naming the field.
    """
    raw = spec.platform.get("slurm") or {}
    try:
        return msgspec.convert(raw, SlurmPolicy)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"slurm settings: {exc}", field="slurm") from exc


def time_minutes(text: str) -> int:
    """Slurm's time format (`30`, `0:01`, `1:00:00`, `2-12`, `2-12:30:00`) in whole minutes,
    rounded up.

    Raises:
        InvalidInput: not a Slurm time.
    """
    if not _TIME.fullmatch(text.strip()):
        raise InvalidInput(f"time {text!r} is not a Slurm time (minutes, MM:SS, HH:MM:SS, "
                           "D-HH[:MM[:SS]])", field="slurm.time")
    days, _, clock = text.strip().rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = [*parts, 0, 0][:3]
        return int(days) * 1440 + hours * 60 + minutes + math.ceil(seconds / 60)
    if len(parts) == 1:  # M
        return parts[0]
    if len(parts) == 2:  # M:S
        return parts[0] + math.ceil(parts[1] / 60)
    return parts[0] * 60 + parts[1] + math.ceil(parts[2] / 60)  # H:M:S


def build_request(spec: LaunchSpec, argv: list[str], env: dict[str, str], workdir: str,
                  log_path: str) -> JobRequest:
    """The job for one worker: resources from the spec, placement from the study settings.

    The time limit is the study's `time` or the spec's timeout, whichever is shorter.

    Raises:
        InvalidInput: bad settings, a sandbox that needs an image without one, nodes < 1.
    """
    settings = settings_of(spec)
    if spec.nodes < 1:
        raise InvalidInput(f"nodes must be 1 or more, not {spec.nodes}", field="nodes")
    limits = [time_minutes(settings.time)] if settings.time else []
    if spec.timeout_s is not None:
        limits.append(max(1, math.ceil(spec.timeout_s / 60)))
    if settings.sandbox != "none" and not spec.image:
        raise InvalidInput(f"sandbox {settings.sandbox} needs an image: set images.default "
                           "for the study in study_runtime.yaml", field="image")
    gpus = len(spec.gpus)
    request = JobRequest(
        name=f"cairn-{spec.job}-{spec.role}-{spec.rank}", comment=TAG_PREFIX + spec.launch_id,
        workdir=workdir, output=log_path, time_minutes=min(limits) if limits else None,
        nodes=spec.nodes, cpus_per_task=math.ceil(spec.millicpus / 1000),
        memory_mb=math.ceil(spec.memory_bytes / 2**20), gpus_per_node=gpus,
        partition=settings.partition, account=settings.account, qos=settings.qos,
        constraint=settings.constraint, reservation=settings.reservation, env=env)
    return msgspec.structs.replace(request, script=batch_script(request, spec, settings, argv))


def sbatch_options(request: JobRequest) -> list[str]:
    """The request as sbatch options (the `#SBATCH` lines of the CLI driver's script)."""
    options = [f"--job-name={request.name}", f"--comment={request.comment}",
               f"--chdir={request.workdir}", f"--output={request.output}",
               f"--nodes={request.nodes}", "--ntasks-per-node=1", "--export=ALL"]
    if request.time_minutes is not None:
        options.append(f"--time={request.time_minutes}")
    if request.cpus_per_task:
        options.append(f"--cpus-per-task={request.cpus_per_task}")
    if request.memory_mb:
        options.append(f"--mem={request.memory_mb}M")
    if request.gpus_per_node:
        options.append(f"--gpus-per-node={request.gpus_per_node}")
    for key in ("partition", "account", "qos", "constraint", "reservation"):
        value = getattr(request, key)
        if value:
            options.append(f"--{key}={value}")
    return options


def rest_properties(request: JobRequest) -> dict[str, Any]:
    """The request as slurmrestd v0.0.38 job properties (`POST /slurm/v0.0.38/job/submit`)."""
    props: dict[str, Any] = {
        "name": request.name, "comment": request.comment,
        "current_working_directory": request.workdir, "standard_output": request.output,
        # A count, not the schema's [min, max]: 22.05 reads that pair as one node.
        "nodes": request.nodes, "tasks_per_node": 1,
        "environment": dict(request.env),
    }
    if request.time_minutes is not None:
        props["time_limit"] = request.time_minutes
    if request.cpus_per_task:
        props["cpus_per_task"] = request.cpus_per_task
    if request.memory_mb:
        props["memory_per_node"] = request.memory_mb
    if request.gpus_per_node:
        props["gpus_per_node"] = str(request.gpus_per_node)
    for key, prop in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                      ("constraint", "constraints"), ("reservation", "reservation")):
        value = getattr(request, key)
        if value:
            props[prop] = value
    return props


def batch_script(request: JobRequest, spec: LaunchSpec, settings: SlurmPolicy,
                 argv: list[str]) -> str:
    """The batch script: `#SBATCH` lines, then the body (see the module docstring)."""
    lines = ["#!/bin/bash", f"# Cairn worker {spec.launch_id}"]
    lines += [f"#SBATCH {option}" for option in sbatch_options(request)]
    lines += [
        'export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-}"',
        'export MASTER_ADDR="$(hostname)"',
        f'export MASTER_PORT="$(( {MASTER_PORT_BASE} + SLURM_JOB_ID % 20000 ))"',
        f'export WORLD_SIZE="{request.nodes}" CAIRN_NODE_COUNT="{request.nodes}"',
    ]
    step = _step(request.gpus_per_node)
    command = _sandboxed(settings.sandbox, spec, request, argv)
    if request.nodes == 1 and settings.sandbox == "none":
        lines.append("export RANK=0 CAIRN_NODE_RANK=0")
        lines.append(_gpu_check(request.gpus_per_node))
        lines.append("exec " + shlex.join(command))
    else:
        srun = ["srun", "--nodes", str(request.nodes), "--ntasks-per-node=1",
                "--kill-on-bad-exit=1", *_pyxis_options(settings, spec, request)]
        lines.append(shlex.join([*srun, "/bin/bash", "-c", step, "cairn-step", *command]))
    return "\n".join(lines) + "\n"


def _gpu_check(gpus: int) -> str:
    # Counts CUDA_VISIBLE_DEVICES entries; exits as the SDK's own check does (cause
    # allocation-mismatch, the node named in worker.log).
    return (
        'seen=$(printf %s "$CUDA_VISIBLE_DEVICES" | tr , "\\n" | grep -c .); '
        f'if [ "$seen" -ne {gpus} ]; then echo "cairn: node $(hostname) ($SLURMD_NODENAME) '
        f'sees $seen GPUs ($CUDA_VISIBLE_DEVICES), the worker asked for {gpus} per node" >&2; '
        f"exit {MISMATCH_EXIT}; fi"
    )


def _step(gpus: int) -> str:
    return ('export RANK="$SLURM_NODEID" CAIRN_NODE_RANK="$SLURM_NODEID" '
            'CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-}"; '
            + _gpu_check(gpus) + '; exec "$@"')


def _sandboxed(sandbox: str, spec: LaunchSpec, request: JobRequest,
               argv: list[str]) -> list[str]:
    if sandbox != "apptainer":
        return argv  # none; pyxis wraps the srun step instead
    command = ["apptainer", "exec", "--cleanenv", "--pwd", request.workdir,
               "--bind", f"{request.workdir}:{request.workdir}"]
    for _, mount in sorted(spec.datasets.items()):
        command += ["--bind", f"{mount.source}:{mount.source}:{mount.mode}"]
    if request.gpus_per_node:
        command.append("--nv")
    image = spec.image
    if not (image.startswith("/") or "://" in image or image.endswith(".sif")):
        image = "docker://" + image
    return [*command, image, *argv]


def _pyxis_options(settings: SlurmPolicy, spec: LaunchSpec, request: JobRequest) -> list[str]:
    if settings.sandbox != "pyxis":
        return []
    mounts = [f"{request.workdir}:{request.workdir}"]
    mounts += [f"{m.source}:{m.source}:{m.mode}" for _, m in sorted(spec.datasets.items())]
    return [f"--container-image={pyxis_image(spec.image)}",
            f"--container-mounts={','.join(mounts)}",
            f"--container-workdir={request.workdir}"]


def pyxis_image(image: str) -> str:
    """An image reference in enroot's form: `registry#repo:tag` (`repo:tag` for Docker Hub)."""
    if image.startswith("/") or image.endswith(".sqsh"):
        return image
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image
