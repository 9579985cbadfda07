"""The parent image (deploy/images/cairn/): every service in one image, the command choosing
it, the health check usable as a container health check, and reproducible builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.docker import BuiltImage, DockerEngine, build_image, image_builder


@pytest.fixture(scope="module")
def parent_image(dockerd: DockerEngine, tmp_path_factory: pytest.TempPathFactory) -> BuiltImage:
    return build_image(dockerd, "cairn", tmp_path_factory.mktemp("images"))


def _run(engine: DockerEngine, image: str, argv: list[str], **options: Any) -> tuple[int, str]:
    client = engine.client(timeout=120)
    try:
        container = client.containers.run(image, argv, network_mode="host", detach=True,
                                          **options)
        try:
            code = container.wait(timeout=60)["StatusCode"]
            return code, container.logs().decode()
        finally:
            container.remove(force=True)
    finally:
        client.close()


def test_the_command_is_a_cairn_command(dockerd: DockerEngine, parent_image: BuiltImage) -> None:
    code, out = _run(dockerd, parent_image.tag, ["run", "--help"])
    assert code == 0, out
    for service in ("coordinator", "agent", "launcher", "snapshotter", "validator", "signer",
                    "httpapi"):
        assert service in out
    # Every service and its recipes catalog are in the image, importable as `cairn run` would.
    script = ("import cairn.coordinator.service, cairn.agent.service, cairn.launcher.service, "
              "cairn.snapshotter.service, cairn.validator.service, cairn.signer.service, "
              "cairn.authority.service, cairn.httpapi.service, cairn.httpapi.app, uvicorn, "
              "numpy; "
              "from cairn.recipes.catalog import load_catalog, default_catalog_dir; "
              "load_catalog(); print(default_catalog_dir())")
    code, out = _run(dockerd, parent_image.tag, ["-c", script], entrypoint=["python3"])
    assert code == 0 and out.strip() == "/usr/local/share/cairn/recipes", out


def test_the_health_check_says_unavailable_without_a_bus(dockerd: DockerEngine,
                                                         parent_image: BuiltImage) -> None:
    # Port 9 (discard) answers nothing: the check must fail fast with 7, not hang or pass.
    code, out = _run(dockerd, parent_image.tag,
                     ["-m", "cairn.runtime.health", "agent", "--nats-url", "nats://127.0.0.1:9"],
                     entrypoint=["python3"])
    assert code == 7, out
    assert "unhealthy" in out


def test_builds_are_reproducible(tmp_path: Path) -> None:
    builder = image_builder("cairn")
    first = builder.build(tmp_path / "a.tar", cache=tmp_path / "cache-a")
    second = builder.build(tmp_path / "b.tar", cache=tmp_path / "cache-b")
    assert not first.cached and not second.cached
    assert first.archive.image_id == second.archive.image_id
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
