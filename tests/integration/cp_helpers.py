"""Helpers for control-plane tests: write job specs and runtime files, read streams."""

from __future__ import annotations

import asyncio
import os
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cairn import events as ev
from cairn import subjects
from cairn.bus import replay
from cairn.runtime.embedded import EmbeddedFederation

ENV_SCRIPT = """\
import json, os
print(json.dumps({k: v for k, v in sorted(os.environ.items()) if k.startswith("CAIRN_")}))
"""
ONLY_SITE_A = """\
    roles:
      client:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 256Mi}
        sites: [site-a]
    """
"""`roles` of a job of one client, at site-a."""


def write_job(job_dir: Path, *, name: str = "hello", script: str = ENV_SCRIPT,
              extra: str = "", roles: str | None = None) -> Path:
    (job_dir / "app").mkdir(parents=True, exist_ok=True)
    (job_dir / "app" / "main.py").write_text(script)
    roles = roles or """\
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 256Mi}
        """
    spec = textwrap.dedent(f"""\
        name: {name}
        code: ./app
        """) + textwrap.dedent(roles) + textwrap.dedent(extra)
    path = job_dir / "job.yaml"
    path.write_text(spec)
    return path


async def study_events(fed: EmbeddedFederation, study: str = "demo",
                       job: str | None = None) -> list[Any]:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        filters = [subjects.job_all(study, job)] if job else []
        return [r.event async for r in replay(bus, f"STUDY_{study}", ev.STUDY_DECODER,
                                              filters=filters) if r.event is not None]
    finally:
        await bus.close()


async def rewrite_runtime(fed: EmbeddedFederation, site: str, studies: dict[str, Any]) -> None:
    """Replace a site's study_runtime.yaml and wait until its agent reloaded it."""
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        subject = subjects.site_event(site, "config-loaded")

        async def loaded() -> int:
            return len([r async for r in replay(bus, "FEDERATION", filters=[subject])])

        before = await loaded()
        path = fed.site_dir(site) / "local" / "study_runtime.yaml"
        path.write_text(yaml.safe_dump({"format": 1, "studies": studies}))
        # Bounded only to report a reload that never comes (a busy machine is slow, not
        # wrong): the proof is the agent's own `config-loaded` event.
        deadline = asyncio.get_running_loop().time() + 90
        while asyncio.get_running_loop().time() < deadline:
            if await loaded() > before:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"agent of {site} did not reload {path}")
    finally:
        await bus.close()


def worker_dirs(fed: EmbeddedFederation, job_id: str, site: str = "*") -> list[Path]:
    """The working directories of a job's workers (at one site, or all), as the host sees
    them: how a test and a sandboxed worker, which sees nothing else of the host, meet."""
    return sorted(fed.dir.glob(f"sites/{site}/work/workers/{job_id}_*"))


async def worker_files(fed: EmbeddedFederation, job_id: str, name: str, count: int = 1,
                       timeout_s: float = 60.0) -> list[Path]:
    """The files called `name` the job's workers left in their folders, once `count` have."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        found = [p for folder in worker_dirs(fed, job_id) if (p := folder / name).exists()]
        if len(found) >= count:
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{count} worker(s) of {job_id} never left {name!r}")
        await asyncio.sleep(0.1)


def release_workers(fed: EmbeddedFederation, job_id: str, name: str = "release") -> None:
    """Leave `name` in every worker folder of the job (workers poll their folder for it)."""
    for folder in worker_dirs(fed, job_id):
        (folder / name).touch()


def processes(match: Callable[[list[bytes]], bool]) -> list[int]:
    """The pids of this machine's processes whose command line (`/proc/<pid>/cmdline`, split
    at NULs) `match` accepts."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if match(argv):
            found.append(int(entry.name))
    return found


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _uid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def worker_process(launched: int) -> int | None:
    """The host pid of the job's own process under the one a launcher started (a worker's
    `native_id`): in a sandbox (bwrap, its init, the wrapper) the first one under a uid of
    its own; unsandboxed, the wrapper's child."""
    level = _children(launched)
    while level:
        for pid in level:
            if _uid(pid) not in (None, os.getuid()):
                return pid
        level = [child for pid in level for child in _children(pid)]
    children = _children(launched)
    return children[0] if children else None


async def running_process(fed: EmbeddedFederation, job: str, site: str,
                          study: str = "demo") -> int:
    """The host pid of the job's own process at `site` (under the one its WorkerRunning
    names)."""
    bus = await fed.bus()
    try:
        running = [r.event async for r in replay(
            bus, subjects.study_stream(study).name, ev.STUDY_DECODER,
            filters=[subjects.job_site(study, job, site, "running")])]
    finally:
        await bus.close()
    assert running and isinstance(running[0], ev.WorkerRunning)
    pid = worker_process(int(running[0].native_id))
    assert pid is not None, f"the worker at {site} has no process under its wrapper"
    return pid


async def dead_letters(fed: EmbeddedFederation) -> list[ev.DeadLettered]:
    """Every dead letter so far (read as the hub)."""
    bus = await fed.bus()
    try:
        return [r.event async for r in replay(bus, subjects.DEADLETTER_STREAM.name,
                                              ev.DEADLETTER_DECODER)
                if isinstance(r.event, ev.DeadLettered)]
    finally:
        await bus.close()


def default_policy(fed: EmbeddedFederation, site: str) -> dict[str, Any]:
    path = fed.site_dir(site) / "local" / "study_runtime.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text())["studies"]["demo"]
    return data
