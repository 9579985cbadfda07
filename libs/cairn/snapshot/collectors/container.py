"""Docker collector (Cairn names: AICR has none for Docker).

    Container.docker.{version, api-version, runtimes, default-runtime, nvidia-runtime,
                      cgroup-driver, cgroup-version, storage-driver}

Asks the engine through the `docker` SDK (7.x) when it is installed, else through
`docker info --format '{{json .}}'`. No SDK, no CLI and no socket means absent.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from cairn.snapshot.collectors.collected import Collected, ToolAbsent, guarded
from cairn.snapshot.collectors.command import DEFAULT_TIMEOUT, run_command
from cairn.snapshot.model import Reading

DEFAULT_SOCKET = "/var/run/docker.sock"


def info_readings(info: dict[str, Any], api_version: str | None = None) -> dict[str, Reading]:
    """Readings from the engine's /info document (the SDK's `info()` or the CLI's JSON)."""
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    out: dict[str, Reading] = {
        "Container.docker.runtimes": runtimes,
        # An nvidia runtime is how a Docker host without CDI gives containers GPUs.
        "Container.docker.nvidia-runtime": "nvidia" in runtimes,
    }
    fields = {
        "ServerVersion": "version",
        "DefaultRuntime": "default-runtime",
        "CgroupDriver": "cgroup-driver",
        "CgroupVersion": "cgroup-version",
        "Driver": "storage-driver",
    }
    for src, key in fields.items():
        value = info.get(src)
        if value not in (None, ""):
            out[f"Container.docker.{key}"] = str(value)
    if api_version:
        out["Container.docker.api-version"] = api_version
    return out


def _absent(host: str | None) -> bool:
    if host or os.environ.get("DOCKER_HOST"):
        return False
    return (
        not Path(DEFAULT_SOCKET).exists()
        and shutil.which("docker") is None
        and shutil.which("dockerd") is None
    )


def _check_unix(where: str, timeout: float) -> None:
    """Fail clearly, and without leaking a socket, when a unix-socket engine is not there.

    docker-py does not close its socket when connecting fails, which leaks a file descriptor
    per attempt in a long-running snapshotter.
    """
    if not where.startswith("unix://"):
        return
    path = where[len("unix://") :]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConnectionError(f"no Docker engine answers at {where}: {reason}") from None


def _via_sdk(sdk: Any, host: str | None, timeout: float) -> dict[str, Reading]:
    where = host or os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    _check_unix(where, timeout)
    try:
        client = (
            sdk.DockerClient(base_url=host, timeout=int(timeout))
            if host
            else sdk.from_env(timeout=int(timeout))
        )
    except sdk.errors.DockerException as exc:
        # The SDK's message nests the socket error three levels deep; say what it means.
        raise ConnectionError(f"cannot reach the Docker engine at {where}: {exc}") from None
    try:
        return info_readings(client.info(), client.api.api_version)
    finally:
        client.close()


def _via_cli(host: str | None, timeout: float) -> dict[str, Reading]:
    argv = ["docker"] + (["-H", host] if host else []) + ["info", "--format", "{{json .}}"]
    return info_readings(json.loads(run_command(argv, timeout=timeout)))


@guarded("docker")
def collect(
    *, host: str | None = None, client: Any = None, timeout: float = DEFAULT_TIMEOUT
) -> Collected:
    """Collect Docker readings.

    Args:
        host: engine address (`unix:///path/docker.sock`); default $DOCKER_HOST or the socket.
        client: an already-open `docker.DockerClient` (its `info()` is used).
        timeout: seconds for the engine to answer.
    """
    if client is not None:
        return Collected(readings=info_readings(client.info(), client.api.api_version))
    if _absent(host):
        raise ToolAbsent("docker not found (no docker CLI, no dockerd, no " + DEFAULT_SOCKET + ")")
    try:
        sdk = importlib.import_module("docker")
    except ImportError:
        return Collected(readings=_via_cli(host, timeout))
    return Collected(readings=_via_sdk(sdk, host, timeout))
