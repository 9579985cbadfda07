"""The top-level docker-compose.yml brings a whole federation up on a real engine, a FedAvg
job submitted from the host runs through it, and `down -v` leaves nothing behind.

Debian's `docker-compose` (1.29) runs docker-compose.yml with docker-compose.test.yml (the
locally built NATS image; an OTLP receiver in place of Jaeger) against the private engine of
tests/fixtures/docker.py. Ports are free ones of this host (every service uses the host's
network), so the sites' files are copied from deploy/compose/ with their NATS port changed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.docker import REPO, DockerEngine, build_image

COMPOSE_HINT = "apt-get install -y --no-install-recommends docker-compose"
SERVICES = ("nats", "jaeger", "coordinator", "hub", "site-a", "site-b")
SITES = ("hub", "site-a", "site-b")
UP_TIMEOUT_S = 240.0
HEALTHY_TIMEOUT_S = 180.0
JOB_TIMEOUT_S = 240.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ComposeProject:
    """One `docker-compose -p NAME -f docker-compose.yml -f docker-compose.test.yml`."""

    name: str
    env: dict[str, str]
    nats_url: str

    def run(self, *args: str, timeout: float = 120.0, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        cmd = ["docker-compose", "-p", self.name, "-f", str(REPO / "docker-compose.yml"),
               "-f", str(REPO / "docker-compose.test.yml"), *args]
        done = subprocess.run(cmd, env=self.env, cwd=REPO, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {done.returncode}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{self.logs()}")
        return done

    def docker(self, *args: str, timeout: float = 60.0) -> str:
        return subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=True).stdout

    def container(self, service: str) -> str:
        return self.run("ps", "-q", service).stdout.strip()

    def health(self) -> dict[str, str]:
        """Service -> its container's health status ("healthy", "starting", ... or the
        container state for one without a health check)."""
        states = {}
        for service in SERVICES:
            cid = self.container(service)
            if not cid:
                states[service] = "absent"
                continue
            fmt = "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}"
            states[service] = self.docker("inspect", "-f", fmt, cid).strip()
        return states

    def logs(self) -> str:
        done = subprocess.run(["docker-compose", "-p", self.name, "-f",
                               str(REPO / "docker-compose.yml"), "-f",
                               str(REPO / "docker-compose.test.yml"), "logs", "--tail", "15"],
                              env=self.env, cwd=REPO, capture_output=True, text=True,
                              timeout=60, check=False)
        return done.stdout[-6000:]

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes still labelled with this project."""
        label = f"label=com.docker.compose.project={self.name}"
        return {kind: self.docker(*cmd, "--filter", label).split()
                for kind, cmd in (("containers", ("ps", "-aq")),
                                  ("networks", ("network", "ls", "-q")),
                                  ("volumes", ("volume", "ls", "-q")))}


@pytest.fixture
def compose(dockerd: DockerEngine, tmp_path: Path) -> Iterator[ComposeProject]:
    if shutil.which("docker-compose") is None:
        if os.environ.get("CI"):
            pytest.fail(f"docker-compose is not installed: {COMPOSE_HINT}")
        pytest.skip(f"docker-compose is not installed: {COMPOSE_HINT}")
    images = tmp_path / "images"
    cairn_image = build_image(dockerd, "cairn", images)
    nats_image = build_image(dockerd, "nats", images)
    nats_port, monitor_port, otlp_port = _free_port(), _free_port(), _free_port()
    config = tmp_path / "config"
    shutil.copytree(REPO / "deploy" / "compose", config)
    for site in SITES:
        site_yaml = config / "sites" / site / "site.yaml"
        text = site_yaml.read_text()
        assert "nats://127.0.0.1:4222" in text
        site_yaml.write_text(text.replace("127.0.0.1:4222", f"127.0.0.1:{nats_port}"))
    env = {**dockerd.env, "CAIRN_IMAGE": cairn_image.tag, "CAIRN_NATS_IMAGE": nats_image.tag,
           "CAIRN_CONFIG": str(config), "CAIRN_NATS_PORT": str(nats_port),
           "CAIRN_NATS_MONITOR_PORT": str(monitor_port), "CAIRN_OTLP_PORT": str(otlp_port)}
    project = ComposeProject(name=f"cairn-test-{os.getpid()}", env=env,
                             nats_url=f"nats://127.0.0.1:{nats_port}")
    try:
        yield project
    finally:
        project.run("down", "-v", "--timeout", "10", timeout=180, check=False)


def wait_healthy(project: ComposeProject) -> dict[str, str]:
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        states = project.health()
        if all(state == "healthy" for state in states.values()):
            return states
        if time.monotonic() > deadline:
            raise AssertionError(f"not healthy after {HEALTHY_TIMEOUT_S:g}s: {states}\n"
                                 f"{project.logs()}")
        time.sleep(1.0)


def put_fedavg_data(project: ComposeProject, tmp_path: Path) -> None:
    """The example's data, made on the host, copied into each site's volume."""
    sites_dir = tmp_path / "sites"
    subprocess.run([sys.executable, str(REPO / "examples" / "fedavg" / "setup_data.py"),
                    "--sites-dir", str(sites_dir), "--hub", "hub", "--sites", "site-a,site-b"],
                   check=True, timeout=120, capture_output=True)
    for site in SITES:
        project.docker("cp", f"{sites_dir / site / 'data'}/.",
                       f"{project.container(site)}:/var/lib/cairn/data/")


def cairn_cli(project: ComposeProject, tmp_path: Path, *args: str) -> dict[str, object]:
    """`cairn ARGS -o json` from the host, tracing into the compose federation's receiver."""
    env = {**os.environ, "CAIRN_NATS_URL": project.nats_url, "CAIRN_STUDY": "demo",
           "CAIRN_ACTOR": "admin@coord", "CAIRN_CONTEXT": str(tmp_path / "no-context.yaml"),
           "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{project.env['CAIRN_OTLP_PORT']}"}
    done = subprocess.run([sys.executable, "-m", "cairn", *args, "-o", "json"], env=env,
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S + 30,
                          check=False)
    assert done.returncode == 0, f"cairn {' '.join(args)}: {done.stderr}\n{project.logs()}"
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
    workers = final["workers"]
    assert isinstance(workers, dict)
    # The server at the hub and a client at each site, each in its site's container.
    assert sorted((w["site"], w["role"]) for w in workers.values()) == [
        ("hub", "server"), ("site-a", "client"), ("site-b", "client")], workers
    assert all(w["state"] == "exited" and w["exit_code"] == 0 for w in workers.values()), \
        json.dumps(workers)
    for worker in workers.values():
        if worker["role"] == "client":
            # The 2000 training points the site's own volume holds (put_fedavg_data).
            assert worker["metrics"]["n_samples"] == 2000, worker
        else:
            assert worker["metrics"]["round"] == 3 and worker["metrics"]["sites"] == 2, worker
            assert worker["metrics"]["accuracy"] > 0.85, worker

    job = str(final["job"])
    services = job_trace(compose, job)
    assert "cairn-worker" in services

    compose.run("down", "-v", "--timeout", "10", timeout=180)
    assert compose.leftovers() == {"containers": [], "networks": [], "volumes": []}
