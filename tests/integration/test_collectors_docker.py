"""The Docker collector against a real, private dockerd (tests/fixtures/docker.py)."""

from __future__ import annotations

import subprocess

from cairn.snapshot.collectors import container
from tests.fixtures.docker import DockerEngine


def test_docker_collector_via_the_sdk(dockerd: DockerEngine) -> None:
    result = container.collect(host=dockerd.host)
    assert result.errors == []
    r = result.readings
    version = subprocess.run(
        ["docker", "-H", dockerd.host, "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout.strip()
    assert r["Container.docker.version"] == version
    assert "runc" in r["Container.docker.runtimes"]  # type: ignore[operator]
    assert r["Container.docker.default-runtime"] == "runc"
    assert r["Container.docker.nvidia-runtime"] is False
    assert r["Container.docker.cgroup-version"] in ("1", "2")
    assert r["Container.docker.api-version"]


def test_docker_collector_via_the_cli_gives_the_same(dockerd: DockerEngine) -> None:
    sdk = container.collect(host=dockerd.host).readings
    cli = container._via_cli(dockerd.host, 10.0)
    assert {k: v for k, v in sdk.items() if k != "Container.docker.api-version"} == cli


def test_an_engine_that_is_not_there_is_an_error(tmp_path: object) -> None:
    result = container.collect(host=f"unix://{tmp_path}/nothing.sock")
    assert result.readings == {}
    assert not result.errors[0].absent
    assert "no Docker engine answers" in result.errors[0].message
