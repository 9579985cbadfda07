"""The top-level docker-compose.yml brings a whole federation up on a real engine, a FedAvg
job submitted from the host runs through it, the JetStream store is backed up and restored as
docs/operate.md says, and `down -v` leaves nothing behind.

Debian's `docker-compose` (1.29) runs docker-compose.yml with docker-compose.test.yml (the
locally built NATS image; an OTLP receiver in place of Jaeger) against the private engine of
tests/fixtures/docker.py, through tests/fixtures/compose.py (free ports; the sites' files
copied from deploy/compose/ with only their NATS port changed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.compose import (
    COMPOSE_HINT,
    SERVICES,
    SITES,
    ComposeProject,
    prepare,
    wait_healthy,
)
from tests.fixtures.docker import REPO, DockerEngine, build_image

UP_TIMEOUT_S = 240.0
JOB_TIMEOUT_S = 240.0
# Building the images, `up`, the job, a backup and a restore, each bounded by its own limit
# above: pytest's default 120 s would cut the test short of them on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def compose(dockerd: DockerEngine, tmp_path: Path) -> Iterator[ComposeProject]:
    if shutil.which("docker-compose") is None:
        if os.environ.get("CI"):
            pytest.fail(f"docker-compose is not installed: {COMPOSE_HINT}")
        pytest.skip(f"docker-compose is not installed: {COMPOSE_HINT}")
    images = tmp_path / "images"
    cairn_image = build_image(dockerd, "cairn", images)
    nats_image = build_image(dockerd, "nats", images)
    project = prepare(dockerd, tmp_path, cairn_image.tag, nats_image.tag)
    try:
        yield project
    finally:
        project.run("down", "-v", "--timeout", "10", timeout=180, check=False)


def put_fedavg_data(project: ComposeProject, tmp_path: Path) -> None:
    """The example's data, made on the host, copied into each site's volume."""
    sites_dir = tmp_path / "sites"
    subprocess.run([sys.executable, str(REPO / "examples" / "fedavg" / "setup_data.py"),
                    "--sites-dir", str(sites_dir), "--hub", "hub", "--sites", "site-a,site-b"],
                   check=True, timeout=120, capture_output=True)
    for site in SITES:
        project.docker("cp", f"{sites_dir / site / 'data'}/.",
                       f"{project.container(site)}:/var/lib/cairn/data/")


def cairn_cli(project: ComposeProject, tmp_path: Path, *args: str,
              exit_code: int = 0) -> dict[str, object]:
    """`cairn ARGS -o json` from the host, tracing into the compose federation's receiver;
    with another `exit_code` expected, what it printed on stderr (`{"stderr": ...}`)."""
    env = {**os.environ, "CAIRN_STUDY": "demo", "CAIRN_CONTEXT": str(project.admin_context()),
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{project.env['CAIRN_OTLP_PORT']}"}
    done = subprocess.run([sys.executable, "-m", "cairn", *args, "-o", "json"], env=env,
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S + 30,
                          check=False)
    assert done.returncode == exit_code, (
        f"cairn {' '.join(args)} exited {done.returncode}: {done.stderr}\n{project.logs()}")
    if exit_code:
        return {"stderr": done.stderr}
    result: dict[str, object] = json.loads(done.stdout)
    return result


def job_trace(project: ComposeProject, job: str, timeout: float = 60.0) -> list[str]:
    """The services that sent spans of the job's trace (the receiver's summary), once the
    trace has spans from the CLI, the coordinator, a site parent and a worker."""
    wanted = {"cairn-cli", "cairn-coordinator+validator+signer",
              "cairn-agent+launcher+snapshotter", "cairn-worker"}
    deadline = time.monotonic() + timeout
    summary: dict[str, object] = {}
    while time.monotonic() < deadline:
        raw = project.docker("exec", project.container("jaeger"), "cat",
                             "/var/lib/otlp/spans.json")
        summary = json.loads(raw)
        traces = summary.get("traces")
        assert isinstance(traces, dict)
        for services in traces.values():
            if wanted <= set(services):
                return list(services)
        time.sleep(1.0)
    raise AssertionError(f"no trace of {job} with spans from {sorted(wanted)}: {summary}")


def operate_snippet(name: str) -> str:
    """The `NAME='...'` Python that docs/operate.md gives for backing up or restoring the
    store: the test runs what the operator is told to run."""
    text = (REPO / "docs" / "operate.md").read_text()
    match = re.search(rf"^{name}='(.*?)'$", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/operate.md has no {name}='...' snippet"
    return match.group(1)


def store_snippet(project: ComposeProject, backup: Path, snippet: str) -> None:
    """Stop, run docs/operate.md's BACKUP or RESTORE on the store's volume, start."""
    volume = f"{project.name}_nats-store"
    mode = "ro" if snippet == "BACKUP" else "rw"
    project.run("stop", "--timeout", "10", timeout=180)
    project.docker("run", "--rm", "--network", "none", "--entrypoint", "python3",
                   "-v", f"{volume}:/store:{mode}", "-v", f"{backup}:/backup",
                   project.env["CAIRN_IMAGE"], "-c", operate_snippet(snippet), timeout=120)
    project.run("start", timeout=180)
    wait_healthy(project)


# Two image builds, three compose starts and two jobs: past the default 120 s on a busy
# 2-core machine (the waits inside are each bounded on their own).
@pytest.mark.timeout(600)
def test_compose_runs_fedavg_submitted_from_the_host_and_down_leaves_nothing(
        compose: ComposeProject, tmp_path: Path) -> None:
    compose.run("up", "-d", timeout=UP_TIMEOUT_S)
    states = wait_healthy(compose)
    assert set(states) == set(SERVICES)

    put_fedavg_data(compose, tmp_path)
    final = cairn_cli(compose, tmp_path, "job", "submit",
                      str(REPO / "examples" / "fedavg" / "job.yaml"), "--watch",
                      "--timeout", str(JOB_TIMEOUT_S))
    assert final["state"] == "completed", final
    # Completed only once every worker had exited: the state --watch ended on says so.
    workers = final["workers"]
    assert isinstance(workers, dict)
    # The server at the hub and a client at each site, each in its site's container.
    assert sorted((w["site"], w["role"]) for w in workers.values()) == [
        ("hub", "server"), ("site-a", "client"), ("site-b", "client")], workers
    for worker in workers.values():
        # Each ended on its own: exit 0, no cause (no client stopped under a completed job).
        assert (worker["state"], worker["exit_code"], worker["cause"]) == ("exited", 0, None), (
            worker)
        if worker["role"] == "client":
            # The 2000 training points the site's own volume holds (put_fedavg_data).
            assert worker["metrics"]["n_samples"] == 2000, worker
        else:
            assert worker["exit_code"] == 0, worker
            assert worker["metrics"]["round"] == 3 and worker["metrics"]["sites"] == 2, worker
            assert worker["metrics"]["accuracy"] > 0.85, worker

    job = str(final["job"])
    services = job_trace(compose, job)
    assert "cairn-worker" in services

    # Backed up as docs/operate.md says; a job submitted after the backup is gone once the
    # backup is restored, and the first job is there, completed, as it was.
    backup = tmp_path / "backup"
    backup.mkdir()
    store_snippet(compose, backup, "BACKUP")
    later = cairn_cli(compose, tmp_path, "job", "submit",
                      str(REPO / "examples" / "fedavg" / "job.yaml"))
    assert cairn_cli(compose, tmp_path, "job", "show", str(later["job"]))["job"] == later["job"]
    store_snippet(compose, backup, "RESTORE")
    shown = cairn_cli(compose, tmp_path, "job", "show", job)
    assert (shown["state"], len(shown["workers"])) == ("completed", 3), shown
    assert cairn_cli(compose, tmp_path, "job", "show", str(later["job"]), exit_code=4)

    compose.run("down", "-v", "--timeout", "10", timeout=180)
    assert compose.leftovers() == {"containers": [], "networks": [], "volumes": []}
