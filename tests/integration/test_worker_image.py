"""The worker image (deploy/images/worker/): built here without a registry, reproducible, and
a working Python with `cairn.worker` and a worker's packages inside."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.docker import REPO, BuiltImage, DockerEngine, image_builder


def _run(engine: DockerEngine, image: str, argv: list[str], **options: Any) -> str:
    client = engine.client(timeout=120)
    try:
        out: bytes = client.containers.run(image, argv, network_mode="none", remove=True,
                                           stderr=True, **options)
    finally:
        client.close()
    return out.decode()


def test_the_image_is_a_python_with_the_worker_sdk(dockerd: DockerEngine,
                                                   worker_image: BuiltImage) -> None:
    version = tuple(sys.version_info[:2])
    script = ("import sys, cairn.worker, cairn.worker.allocation, msgspec, nats, numpy; "
              f"print(sys.prefix, tuple(sys.version_info[:2]) == {version}, "
              "cairn.worker.Worker.__name__)")
    out = _run(dockerd, worker_image.tag, ["python", "-c", script])
    assert out.split() == ["/usr/local", "True", "Worker"], out
    # Bytecode came with it: an import compiles nothing (the image is read-only here).
    out = _run(dockerd, worker_image.tag,
               ["python", "-X", "importtime", "-c", "import cairn.worker.sdk"], read_only=True)
    assert "cairn.worker.sdk" in out
    # A shell for operators and non-Python entrypoints.
    assert _run(dockerd, worker_image.tag, ["sh", "-c", "echo $PWD; id -u"]).split() == [
        "/cairn/work", "0"]


def test_the_same_inputs_give_the_same_image_id(tmp_path: Path,
                                                worker_image: BuiltImage) -> None:
    build = image_builder("worker")
    # Two builds from nothing (fresh caches, so nothing is reused) are byte-identical.
    first = build.build(tmp_path / "a.tar", cache=tmp_path / "cache-a")
    second = build.build(tmp_path / "b.tar", cache=tmp_path / "cache-b")
    assert first.archive.image_id == second.archive.image_id
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    if first.input_hash == worker_image.input_hash:  # the tree did not change meanwhile
        assert first.archive.image_id == worker_image.image_id


@pytest.mark.parametrize("host_path", ["/root/.pyenv", "/work", str(REPO)])
def test_no_host_folder_is_baked_in(dockerd: DockerEngine, worker_image: BuiltImage,
                                    host_path: str) -> None:
    out = _run(dockerd, worker_image.tag, ["sh", "-c", f"ls -d {host_path} 2>&1 || true"])
    assert "No such file" in out
