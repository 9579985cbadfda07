"""Benchmark: launch -> worker running for each backend, next to the platform's own start of the
same worker, in one run.

"Running" means the worker's own first statement ran: it writes `time.time()` to a file in its
working directory, for Cairn's path and the platform's alike. Runs alternate between the two,
so load on the machine falls on both. Medians of `RUNS`.

- process: `ProcessBackend.launch` (working directory, exit wrapper, allocation env; cold and
  warm) next to `subprocess.Popen` of the same interpreter and command.
- docker: `DockerBackend.launch` of the worker image (deploy/images/worker/) next to
  `docker run` (the SDK's `containers.run`, detached) of the same image and command, on a
  private engine (tests/fixtures/docker.py; needs root and docker.io).

Cairn's overhead is the difference of the medians. Another backend joins by adding a coroutine
to `PLATFORMS` that returns {"cairn_s", "platform_s", ...}. `make bench` (tools/bench.py) calls
`run()`; run alone with `python tools/bench_launchers.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

RUNS = 7
WAIT_S = 60.0
FIRST_LINE = ("import os, time; open(os.path.join(os.environ.get('CAIRN_WORKDIR', '.'), "
              "'first_line'), 'w').write(repr(time.time()))")
CONTRACT = {"CAIRN_NATS_URL": "nats://127.0.0.1:1", "CAIRN_STUDY": "bench", "CAIRN_JOB": "b",
            "CAIRN_SITE": "site-a", "CAIRN_ROLE": "client", "CAIRN_RANK": "0",
            "CAIRN_ATTEMPT": "0"}


def _say(message: str) -> None:
    print(f"[bench launchers] {message}", file=sys.stderr, flush=True)


async def _written(marker: Path) -> float:
    """The time the worker wrote into `marker`, once it is there."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            text = marker.read_text()
            if text:
                return float(text)
        except (OSError, ValueError):
            pass
        await asyncio.sleep(0.002)
    raise TimeoutError(f"{marker} was not written within {WAIT_S:.0f}s")


def _spec(code: Path, index: int, **kw: Any) -> Any:
    from cairn.launcher.backends import LaunchSpec, make_launch_id

    return LaunchSpec(launch_id=make_launch_id("b", "site-a", "client", index, 0), job="b",
                      study="bench", site="site-a", role="client", rank=index,
                      entrypoint=["python", "-c", FIRST_LINE], code_dir=str(code),
                      env=CONTRACT, **kw)


def _summary(cairn: list[float], plain: list[float], **extra: Any) -> dict[str, Any]:
    c, p = statistics.median(cairn), statistics.median(plain)
    return {"cairn_s": round(c, 4), "platform_s": round(p, 4),
            "overhead_s": round(c - p, 4), "runs": len(cairn), **extra}


async def _process(root: Path) -> dict[str, Any]:
    from cairn.launcher.backends.process import ProcessBackend

    code = root / "code"
    code.mkdir()
    out: dict[str, Any] = {}
    for warm in (False, True):
        backend = ProcessBackend(root / f"site-{warm}", poll_s=0.05, warm=warm)
        cairn, plain = [], []
        try:
            if warm:  # the warm interpreter starts once, before the first launch needs it
                handle = await backend.launch(_spec(code, 999))
                await backend.wait(handle)
            for i in range(RUNS):
                started = time.time()
                handle = await backend.launch(_spec(code, i))
                cairn.append(await _written(Path(handle.workdir) / "first_line") - started)
                await backend.wait(handle)
                folder = root / f"plain-{warm}-{i}"
                folder.mkdir()
                started = time.time()
                proc = await asyncio.to_thread(
                    subprocess.Popen, [sys.executable, "-c", FIRST_LINE], cwd=folder,
                    env={"PATH": os.environ.get("PATH", ""), "CAIRN_WORKDIR": str(folder)})
                plain.append(await _written(folder / "first_line") - started)
                await asyncio.to_thread(proc.wait, WAIT_S)
        finally:
            await backend.close()
        out["warm" if warm else "cold"] = _summary(cairn, plain, platform="subprocess.Popen")
    return out


async def _docker(root: Path) -> dict[str, Any]:
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        return {"skipped": "needs root and dockerd: apt-get install docker.io"}
    from cairn.launcher.backends.docker import DockerBackend
    from tests.fixtures.docker import build_image, start_engine, stop

    engine = start_engine(Path(tempfile.mkdtemp(prefix="cairn-bench-dockerd-")))
    try:
        built = time.perf_counter()
        image = build_image(engine, "worker", root / "images")
        build_s = time.perf_counter() - built
        code = root / "dcode"
        code.mkdir()
        backend = DockerBackend(root / "dsite", docker_host=engine.host, poll_s=0.05,
                                secrets_root=root / "shm")
        client = engine.client()
        cairn, plain = [], []
        try:
            for i in range(RUNS):
                started = time.time()
                handle = await backend.launch(_spec(code, i, image=image.tag,
                                                    platform={"docker": {"network": "none"}}))
                cairn.append(await _written(Path(handle.workdir) / "first_line") - started)
                await backend.wait(handle)
                folder = root / f"drun-{i}"
                folder.mkdir()
                started = time.time()
                container = await asyncio.to_thread(
                    client.containers.run, image.tag, ["python", "-c", FIRST_LINE],
                    detach=True, network_mode="none", working_dir="/w",
                    environment={"CAIRN_WORKDIR": "/w"},
                    volumes={str(folder): {"bind": "/w", "mode": "rw"}})
                plain.append(await _written(folder / "first_line") - started)
                await asyncio.to_thread(container.wait, timeout=WAIT_S)
                await asyncio.to_thread(container.remove, force=True)
        finally:
            client.close()
            await backend.close()
        return _summary(cairn, plain, platform="docker run (same image, same command)",
                        image=image.tag, image_id=image.image_id,
                        image_build_and_load_s=round(build_s, 2))
    finally:
        stop(engine)
        shutil.rmtree(engine.root, ignore_errors=True)


PLATFORMS: dict[str, Callable[[Path], Awaitable[dict[str, Any]]]] = {
    "process": _process,
    "docker": _docker,
}


async def run() -> dict[str, Any]:
    """Median seconds from launch to the worker's first statement, Cairn vs the platform."""
    out: dict[str, Any] = {}
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-launchers-"))
    try:
        for name, measure in PLATFORMS.items():
            _say(f"{name}: {RUNS} runs each")
            (root / name).mkdir()
            try:
                out[name] = await measure(root / name)
            except Exception as exc:  # noqa: BLE001 - one platform must not hide the others
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run()), indent=2))
