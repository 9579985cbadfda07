"""A worker's environment, built by one function for every backend: the contract on top, the
study's env below it, secrets as files, and one set of GPU rules that differ only by who
picks the devices (the local host, a container runtime, the platform)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cairn import tracespool
from cairn.events import WorkerRef
from cairn.launcher.backends import LaunchSpec
from cairn.launcher.backends._env import (
    GpuIds,
    WorkerPlatform,
    contract_env,
    host_start_env,
    worker_environment,
)
from cairn.launcher.backends.kubernetes_pod import worker_env as pod_env
from cairn.worker.allocation import ENV as ALLOCATION_ENV
from cairn.worker.sdk import Worker

REF = WorkerRef(job="j1", site="site-a", role="client", rank=2, attempt=1)


def spec(**kw: object) -> LaunchSpec:
    fields: dict[str, object] = {**REF.launch_fields("lung"), "entrypoint": "python -m app",
                                 "code_dir": "/nowhere"}
    fields.update(kw)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def platform(gpu_ids: GpuIds, **kw: object) -> WorkerPlatform:
    return WorkerPlatform(workdir="/w", data="/w/data", secrets="/w/secrets", gpu_ids=gpu_ids,
                          **kw)  # type: ignore[arg-type]


def test_the_contract_is_what_the_sdk_reads() -> None:
    env = contract_env(REF, study="lung", nats_url="nats://127.0.0.1:4222", params={"lr": 0.1})
    worker = Worker.from_env({**env, "CAIRN_WORKDIR": "/w"})
    assert worker.ref == REF and worker.study == "lung"
    assert worker.params == {"lr": 0.1} and worker.nats_url == "nats://127.0.0.1:4222"


def test_a_study_env_never_shadows_the_contract_or_shows_gpus(tmp_path: Path) -> None:
    launch = spec(env={"CAIRN_JOB": "j1"}, secret_env={"TOKEN": "t"},
                  study_env={"CAIRN_JOB": "evil", "CUDA_VISIBLE_DEVICES": "0,1,2",
                             "NVIDIA_VISIBLE_DEVICES": "all", "TZ": "UTC",
                             tracespool.SPOOL_ENV: "/tmp/elsewhere"})
    env = worker_environment(launch, WorkerPlatform(
        workdir=str(tmp_path), data=str(tmp_path / "data"), secrets=str(tmp_path / "s"),
        gpu_ids=GpuIds.HOST, start=host_start_env("/opt/py/bin/python3", str(tmp_path))))
    assert env["CAIRN_JOB"] == "j1" and env["TZ"] == "UTC"
    assert env["TOKEN_FILE"] == f"{tmp_path}/s/TOKEN" and "TOKEN" not in env  # never a value
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert tracespool.SPOOL_ENV not in env  # no endpoint, no backend that forwards
    assert env["CAIRN_WORKDIR"] == str(tmp_path) and env["CAIRN_DATA"] == str(tmp_path / "data")
    assert env["PATH"].split(os.pathsep)[0] == "/opt/py/bin"


@pytest.mark.parametrize(("gpu_ids", "visible"), [
    (GpuIds.HOST, "0,3"),     # the host's devices: named
    (GpuIds.RUNTIME, None),   # the runtime exposes those two only, renumbered
    (GpuIds.PLATFORM, None),  # the device plugin or Slurm sets what the worker sees
])
def test_a_worker_given_gpus_sees_what_the_platform_gives(gpu_ids: GpuIds,
                                                           visible: str | None) -> None:
    env = worker_environment(spec(gpus=["0", "3"], study_env={"CUDA_VISIBLE_DEVICES": "1"}),
                             platform(gpu_ids))
    assert env.get("CUDA_VISIBLE_DEVICES") == visible
    assert "NVIDIA_VISIBLE_DEVICES" not in env


@pytest.mark.parametrize("gpu_ids", list(GpuIds))
def test_a_worker_without_gpus_sees_none_on_any_platform(gpu_ids: GpuIds) -> None:
    env = worker_environment(spec(study_env={"NVIDIA_VISIBLE_DEVICES": "all"}),
                             platform(gpu_ids))
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_only_the_platform_that_picks_devices_leaves_their_ids_out_of_the_allocation() -> None:
    from cairn.worker.allocation import parse

    picked = spec(gpus=["0", "3"])
    by_agent = parse(worker_environment(picked, platform(GpuIds.RUNTIME))[ALLOCATION_ENV])
    by_plugin = parse(worker_environment(picked, platform(GpuIds.PLATFORM))[ALLOCATION_ENV])
    assert by_agent.gpu_ids == ("0", "3") and by_plugin.gpu_ids == ()
    assert by_agent.gpus == by_plugin.gpus == 2


def test_spans_are_spooled_only_where_the_launcher_forwards_them() -> None:
    traced = spec(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert worker_environment(traced, platform(GpuIds.RUNTIME, spool="/w/spans")
                              )[tracespool.SPOOL_ENV] == "/w/spans"
    assert tracespool.SPOOL_ENV not in worker_environment(traced, platform(GpuIds.PLATFORM))
    assert tracespool.SPOOL_ENV not in worker_environment(spec(), platform(
        GpuIds.RUNTIME, spool="/w/spans"))


def test_the_platforms_own_facts_come_last() -> None:
    env = worker_environment(spec(study_env={"HOME": "/root"}, env={"HOME": "/x"}),
                             platform(GpuIds.HOST, facts={"HOME": "/w"}))
    assert env["HOME"] == "/w"


def test_a_pod_names_every_secret_as_a_file_mounted_or_written() -> None:
    env = {e["name"]: e["value"] for e in pod_env(spec(secret_env={"B": "v"},
                                                       secret_refs={"A": "k8s:s/a"}))}
    assert env["A_FILE"].endswith("/A") and env["B_FILE"].endswith("/B")
    assert "B" not in env and "v" not in env.values()
