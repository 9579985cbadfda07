"""The Slurm job Cairn asks for: sbatch options, REST properties, the batch script (sandbox
lines for apptainer and pyxis, which do not install here, are checked as text), and the
per-node GPU check, run with bash."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import InvalidInput
from cairn.launcher.backends import DatasetMount, LaunchSpec
from cairn.launcher.backends.slurm.rest import mint_token
from cairn.launcher.backends.slurm.script import (
    build_request,
    pyxis_image,
    rest_properties,
    sbatch_options,
    time_minutes,
)

WORKDIR = "/shared/cairn/workers/j1_site-a_client_0_0"


def spec(**kw: Any) -> LaunchSpec:
    fields: dict[str, Any] = {"launch_id": "j1/site-a/client/0/0", "job": "j1", "study": "lung",
                              "site": "site-a", "role": "client", "entrypoint": "python -m app",
                              "code_dir": "/tmp/code"}
    fields.update(kw)
    return LaunchSpec(**fields)


def build(s: LaunchSpec, argv: list[str] | None = None) -> Any:
    return build_request(s, argv or ["python", "-m", "app"], {"CAIRN_JOB": "j1"}, WORKDIR,
                         WORKDIR + "/worker.log")


def test_resources_and_study_settings_become_sbatch_options() -> None:
    s = spec(gpus=["0", "1"], millicpus=1500, memory_bytes=3 * 2**30 + 1, timeout_s=90,
             platform={"slurm": {"partition": "gpu", "account": "lung", "qos": "normal",
                                 "time": "02:00:00", "constraint": "a100&ib",
                                 "reservation": "maint"}})
    options = sbatch_options(build(s))
    assert options == [
        "--job-name=cairn-j1-client-0", "--comment=cairn:j1/site-a/client/0/0",
        f"--chdir={WORKDIR}", f"--output={WORKDIR}/worker.log", "--nodes=1",
        "--ntasks-per-node=1", "--export=ALL", "--time=2", "--cpus-per-task=2",
        "--mem=3073M", "--gpus-per-node=2", "--partition=gpu", "--account=lung",
        "--qos=normal", "--constraint=a100&ib", "--reservation=maint"]
    script = build(s).script
    for option in options:
        assert f"#SBATCH {option}\n" in script


def test_rest_properties_carry_the_same_request() -> None:
    request = build(spec(gpus=["0"], nodes=2, memory_bytes=2**30,
                         platform={"slurm": {"partition": "gpu", "constraint": "v100"}}))
    props = rest_properties(request)
    assert props["nodes"] == 2 and props["tasks_per_node"] == 1
    assert props["gpus_per_node"] == "1" and props["memory_per_node"] == 1024
    assert props["partition"] == "gpu" and props["constraints"] == "v100"
    assert props["comment"] == "cairn:j1/site-a/client/0/0"
    assert props["environment"] == {"CAIRN_JOB": "j1"}
    assert "CAIRN_JOB" not in repr(request) or "j1" not in repr(request).split("env")[0]


def test_one_node_execs_the_entrypoint_several_use_one_srun_task_per_node() -> None:
    one = build(spec()).script
    assert "\nexec python -m app\n" in one and "srun" not in one
    many = build(spec(nodes=2, gpus=["0", "1"])).script
    srun = next(line for line in many.splitlines() if line.startswith("srun "))
    assert srun.startswith("srun --nodes 2 --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/bash")
    assert srun.endswith("cairn-step python -m app")
    assert 'RANK="$SLURM_NODEID"' in srun and "-ne 2 ]" in srun
    assert "export WORLD_SIZE=\"2\"" in many and 'MASTER_ADDR="$(hostname)"' in many


def test_apptainer_lines() -> None:
    s = spec(image="registry.site-a/worker:1.0", gpus=["0"],
             datasets={"ct": DatasetMount(source="/srv/ct", mode="ro")},
             platform={"slurm": {"sandbox": "apptainer"}})
    line = build(s).script.splitlines()[-1]
    # Run in the srun step, after the step's GPU check.
    assert line.startswith("srun --nodes 1 ")
    assert line.endswith(f"cairn-step apptainer exec --cleanenv --pwd {WORKDIR} "
                         f"--bind {WORKDIR}:{WORKDIR} --bind /srv/ct:/srv/ct:ro --nv "
                         "docker://registry.site-a/worker:1.0 python -m app")
    sif = build(spec(image="/images/w.sif", platform={"slurm": {"sandbox": "apptainer"}}))
    assert " /images/w.sif python -m app" in sif.script


def test_pyxis_lines() -> None:
    s = spec(image="registry.site-a/worker:1.0",
             datasets={"ct": DatasetMount(source="/srv/ct", mode="ro")},
             platform={"slurm": {"sandbox": "pyxis"}})
    srun = build(s).script.splitlines()[-1]
    assert "--container-image=registry.site-a#worker:1.0" in srun
    assert f"--container-mounts={WORKDIR}:{WORKDIR},/srv/ct:/srv/ct:ro" in srun
    assert f"--container-workdir={WORKDIR}" in srun
    assert pyxis_image("ubuntu:24.04") == "ubuntu:24.04"
    assert pyxis_image("nvcr.io/nvidia/pytorch:24.01") == "nvcr.io#nvidia/pytorch:24.01"
    assert pyxis_image("/images/w.sqsh") == "/images/w.sqsh"


def test_a_sandbox_needs_an_image_and_settings_are_strict() -> None:
    with pytest.raises(InvalidInput, match="needs an image"):
        build(spec(platform={"slurm": {"sandbox": "pyxis"}}))
    with pytest.raises(InvalidInput, match="slurm settings"):
        build(spec(platform={"slurm": {"partitions": "gpu"}}))
    with pytest.raises(InvalidInput, match="slurm settings"):
        build(spec(platform={"slurm": {"sandbox": "docker"}}))
    with pytest.raises(InvalidInput, match="nodes"):
        build(spec(nodes=0))


@pytest.mark.parametrize(("text", "minutes"), [
    ("30", 30), ("0:01", 1), ("1:30", 2), ("02:00:00", 120), ("1:00:01", 61),
    ("2-12", 3600), ("1-00:30", 1470), ("1-0:0:30", 1441)])
def test_slurm_times(text: str, minutes: int) -> None:
    assert time_minutes(text) == minutes


def test_bad_slurm_time() -> None:
    with pytest.raises(InvalidInput, match="not a Slurm time"):
        time_minutes("2h")


def test_the_shorter_of_study_time_and_job_timeout_wins() -> None:
    assert build(spec(timeout_s=600, platform={"slurm": {"time": "1:00:00"}})).time_minutes == 10
    assert build(spec(timeout_s=7200, platform={"slurm": {"time": "30"}})).time_minutes == 30
    assert build(spec(timeout_s=1)).time_minutes == 1
    assert build(spec()).time_minutes is None


@pytest.mark.parametrize(("visible", "asked", "ok"), [
    ("0,1", 2, True), ("0", 2, False), ("", 0, True), ("0", 0, False), ("", 1, False)])
def test_the_gpu_check_of_each_node(tmp_path: Path, visible: str, asked: int, ok: bool) -> None:
    # The script's check itself, run by bash with what Slurm would have set on one node.
    gpus = [str(i) for i in range(asked)]
    script = build(spec(gpus=gpus), ["echo", "worker-ran"]).script
    path = tmp_path / "job.sh"
    path.write_text(script)
    out = subprocess.run(["bash", str(path)], env={"PATH": "/usr/bin:/bin",
                                                   "CUDA_VISIBLE_DEVICES": visible,
                                                   "SLURM_JOB_ID": "5"},
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == (0 if ok else 78), out
    assert ("worker-ran" in out.stdout) is ok
    if not ok:
        assert f"the worker asked for {asked} per node" in out.stderr


def test_minted_tokens_are_hs256_jwts_for_the_user() -> None:
    import base64
    import hashlib
    import hmac
    import json

    token = mint_token(b"k" * 32, "cairn", now=1000.0, lifespan_s=60)
    head, claims, sig = token.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    assert json.loads(base64.urlsafe_b64decode(pad(claims))) == {"exp": 1060, "iat": 1000,
                                                                 "sun": "cairn"}
    mac = hmac.new(b"k" * 32, f"{head}.{claims}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(pad(sig)) == mac
