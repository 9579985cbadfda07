"""The Docker backend running real Python workers from the worker image (deploy/images/worker/)
on a real, private engine: memory limit, cancel, read-only data, secrets, image approval."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cairn.launcher.backends import DatasetMount, LaunchFailed, LaunchSpec, make_launch_id
from cairn.launcher.backends.docker import DockerBackend
from cairn.launcher.backends.errors import ImageNotApproved
from tests.fixtures.docker import BuiltImage, DockerEngine

CONTRACT = {"CAIRN_NATS_URL": "nats://127.0.0.1:4222", "CAIRN_STUDY": "lung",
            "CAIRN_JOB": "j1", "CAIRN_SITE": "site-a", "CAIRN_ROLE": "client",
            "CAIRN_RANK": "0", "CAIRN_ATTEMPT": "0"}

# Records SIGTERM in the working directory (what the launcher's cancel sends), then exits.
TERM_AWARE = """\
import os, pathlib, signal, sys, time
def stop(signum, frame):
    pathlib.Path("saw-sigterm").write_text(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
async def backend(dockerd: DockerEngine, tmp_path: Path) -> AsyncIterator[DockerBackend]:
    b = DockerBackend(tmp_path / "site", docker_host=dockerd.host, grace_s=5.0, poll_s=0.1,
                      secrets_root=tmp_path / "shm")
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "term_aware.py").write_text(TERM_AWARE)
    return code


def spec(code: Path, image: BuiltImage | str, entrypoint: list[str], rank: int = 0,
         **kw: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "launch_id": make_launch_id("j1", "site-a", "client", rank, 0), "job": "j1",
        "study": "lung", "site": "site-a", "role": "client", "rank": rank,
        "entrypoint": entrypoint, "code_dir": str(code), "env": CONTRACT,
        "image": image if isinstance(image, str) else image.tag,
        "platform": {"docker": {"network": "none"}}}
    fields.update(kw)
    return LaunchSpec(**fields)


def py(source: str) -> list[str]:
    return ["python", "-c", source]


async def test_a_python_worker_over_its_memory_limit_ends_with_oom(
        backend: DockerBackend, code_dir: Path, worker_image: BuiltImage) -> None:
    hog = py("x = bytearray(512 * 1024 * 1024); print(len(x))")
    handle = await backend.launch(spec(code_dir, worker_image, hog,
                                       memory_bytes=96 * 1024 * 1024))
    ended = await backend.wait(handle)
    assert (ended.cause, ended.exit_code) == ("oom", 137), ended


async def test_cancel_reaches_the_worker_as_sigterm(
        backend: DockerBackend, code_dir: Path, worker_image: BuiltImage,
        tmp_path: Path) -> None:
    handle = await backend.launch(spec(code_dir, worker_image, ["python", "term_aware.py"]))
    async for chunk in backend.logs(handle, follow=True):
        if b"ready" in chunk:
            break
    await backend.cancel(handle, grace_s=20.0)
    ended = await backend.wait(handle)
    # The worker itself saw SIGTERM (it wrote so), and was not killed after the grace period.
    assert (Path(handle.workdir) / "saw-sigterm").read_text() == "SIGTERM"
    assert (ended.cause, ended.exit_code) == ("cancelled", 0)


async def test_a_dataset_mount_is_read_only(
        backend: DockerBackend, code_dir: Path, worker_image: BuiltImage,
        tmp_path: Path) -> None:
    source = tmp_path / "ct"
    source.mkdir()
    (source / "scan.txt").write_text("lungs")
    script = ("import os, pathlib; d = pathlib.Path(os.environ['CAIRN_DATA']) / 'ct'; "
              "print((d / 'scan.txt').read_text())\n"
              "try:\n    (d / 'new.txt').write_text('x')\n    print('WROTE')\n"
              "except OSError as exc:\n    print('REFUSED', exc.errno)\n")
    handle = await backend.launch(spec(code_dir, worker_image, py(script), datasets={
        "ct": DatasetMount(source=str(source), mode="ro")}))
    ended = await backend.wait(handle)
    log = Path(handle.log_path).read_text()
    assert ended.cause is None, log
    assert log.split() == ["lungs", "REFUSED", "30"]  # EROFS
    assert sorted(p.name for p in source.iterdir()) == ["scan.txt"]


async def test_the_secret_is_a_file_and_absent_from_docker_inspect(
        backend: DockerBackend, code_dir: Path, worker_image: BuiltImage,
        dockerd: DockerEngine, tmp_path: Path) -> None:
    value = "s3cret-9f8e7d"
    script = ("import os, stat, time; from cairn.worker import Worker; "
              "p = os.environ['DB_PASSWORD_FILE']; w = Worker.from_env(); "
              "print(p, open(p).read(), oct(stat.S_IMODE(os.stat(p).st_mode)), "
              "'DB_PASSWORD' in os.environ, w.secret('DB_PASSWORD'), flush=True)\n"
              "try:\n    w.secret('OTHER')\nexcept Exception as exc:\n"
              "    print(type(exc).__name__, flush=True)\ntime.sleep(600)")
    handle = await backend.launch(spec(code_dir, worker_image, py(script),
                                       secret_env={"DB_PASSWORD": value}))
    client = dockerd.client()
    try:
        inspect = client.api.inspect_container(handle.native_id)
        logs = b""
        for _ in range(300):
            logs = client.api.logs(handle.native_id)
            if b"NotFound" in logs:
                break
            await asyncio.sleep(0.1)
    finally:
        client.close()
    assert value not in json.dumps(inspect)  # not in Env, labels, mounts or anything else
    assert "DB_PASSWORD_FILE=/cairn/secrets/DB_PASSWORD" in inspect["Config"]["Env"]
    mount = next(m for m in inspect["Mounts"] if m["Destination"] == "/cairn/secrets")
    assert mount["RW"] is False
    assert logs.decode().split() == ["/cairn/secrets/DB_PASSWORD", value, "0o400", "False",
                                     value, "NotFound"], logs
    host_folder = Path(mount["Source"])
    assert oct(host_folder.stat().st_mode & 0o777) == "0o700"
    await backend.cancel(handle, grace_s=1.0)
    await backend.wait(handle)
    assert not host_folder.exists()  # removed with the worker


async def test_an_image_pinned_by_digest_runs_only_as_that_content(
        backend: DockerBackend, code_dir: Path, worker_image: BuiltImage,
        dockerd: DockerEngine) -> None:
    """Digest pinning (`images.approved: ["cairn/*@sha256:*"]`) made real: the local image's
    content is checked, and it runs by id."""
    name = worker_image.tag
    pinned = f"{name}@{worker_image.image_id}"
    ok = await backend.launch(spec(code_dir, pinned, py("print('pinned ok')"), rank=0))
    assert (await backend.wait(ok)).cause is None
    assert "pinned ok" in Path(ok.log_path).read_text()

    # The same name, but other content than the approval pinned: refused before it runs.
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ImageNotApproved, match="not the pinned sha256:0000"):
        await backend.launch(spec(code_dir, f"{name}@{wrong}", py("print(1)"), rank=1))
    # The right content under a name it does not have here: refused too.
    untagged = f"cairn-test/other@{worker_image.image_id}"
    with pytest.raises(ImageNotApproved, match="not named cairn-test/other"):
        await backend.launch(spec(code_dir, untagged, py("print(1)"), rank=2))
    with pytest.raises(LaunchFailed, match="not on this site's Docker Engine"):
        await backend.launch(spec(code_dir, f"nowhere/none:1@{wrong}", py("1"), rank=3))
    assert sorted(p.name for p in (backend.root / "workers").iterdir()) == [
        "j1_site-a_client_0_0"]  # nothing left of the refused ones
