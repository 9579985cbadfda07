"""Record golden histories for tests/replay/: real jobs on an embedded federation, one history
per ending (completed, failed, oom, timeout, rejected, cancelled while running, reconciled
after a restart of the site parent), each saved with what today's reducers fold from it.

    .venv/bin/python tools/record_golden.py [--out tests/replay/histories] [--only NAME]

Each history is a folder: `study.jsonl` (the job's events and commands and the study's admin
events, as stored in STUDY_demo), `site-<site>.jsonl` (its launch commands, as stored in
SITE_<site>), and `expected.json` (the study view, and per site the agent's view and the
launcher's launches). Re-record only on purpose: tests/replay/ fails when a reducer change
would rewrite what a recorded history means.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cairn import events as ev  # noqa: E402
from cairn import subjects  # noqa: E402
from cairn.bus import Bus, replay  # noqa: E402
from cairn.client import Client  # noqa: E402
from cairn.runtime.context import Context  # noqa: E402
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation  # noqa: E402
from tests.replay.golden import SITES, History, expected_of  # noqa: E402

STUDY = "demo"
SLEEP = "import sys, time\ntime.sleep(float(sys.argv[1]))\nprint('slept', flush=True)\n"
JOB = """\
name: {name}
code: ./app
{extra}roles:
  client:
    entrypoint: {entrypoint}
    resources: {{cpus: 1, memory: {memory}}}
    sites: [site-a]
"""

Scenario = Callable[[EmbeddedFederation, Client, Path], Awaitable[str]]


def _job(base: Path, name: str, script: str, *, entrypoint: str = "python main.py",
         memory: str = "256Mi", extra: str = "") -> Path:
    app = base / name / "app"
    app.mkdir(parents=True)
    (app / "main.py").write_text(script)
    spec = app.parent / "job.yaml"
    spec.write_text(JOB.format(name=name, entrypoint=entrypoint, memory=memory, extra=extra))
    return spec


async def _until(client: Client, job_id: str, state: str, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s * 10)):
        job = await client.job(job_id)
        if any(w.state == state for w in job.workers.values()):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no worker of {job_id} reached {state}")


async def completed(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    return await client.submit(_job(base, "completed", "print('hello')\n"))


async def failed(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    return await client.submit(_job(base, "failed", "raise SystemExit(3)\n"))


async def oom(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    hog = "x = bytearray(1024 * 1024 * 1024)\nprint(len(x))\n"
    return await client.submit(_job(base, "oom", hog, memory="128Mi"))


async def timeout(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    return await client.submit(_job(base, "timeout", SLEEP, entrypoint="python main.py 120",
                                    extra="timeout: 2s\n"))


async def rejected(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    # No image is approved for the study at site-a: the agent refuses it.
    return await client.submit(_job(base, "rejected", "print('never')\n",
                                    extra="image: evil.example/miner:1\n"))


async def cancelled(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    job_id = await client.submit(_job(base, "cancelled", SLEEP,
                                      entrypoint="python main.py 120"))
    await _until(client, job_id, "running")
    await client.cancel(job_id)
    return job_id


async def reconciled(fed: EmbeddedFederation, client: Client, base: Path) -> str:
    """The site parent is killed while its worker runs; the worker ends while the launcher is
    down; the restarted launcher finds how it ended and reports it."""
    job_id = await client.submit(_job(base, "reconciled", SLEEP,
                                      entrypoint="python main.py 3"))
    await _until(client, job_id, "running")
    fed.kill("site-site-a")
    await asyncio.sleep(5.0)  # the worker (3 s) ends while nobody watches it
    fed.respawn("site-site-a")
    await fed.wait_healthy(60)
    return job_id


SCENARIOS: dict[str, Scenario] = {
    "completed": completed, "failed": failed, "oom": oom, "timeout": timeout,
    "rejected": rejected, "cancelled-while-running": cancelled,
    "reconciled-after-restart": reconciled,
}


async def _stored(bus: Bus, stream: str, filters: list[str]) -> list[bytes]:
    return [item.raw async for item in replay(bus, stream, filters=filters)]


async def _history(bus: Bus, job_id: str) -> History:
    stored = await _stored(bus, subjects.study_stream(STUDY).name,
                           [subjects.study_admin_all(STUDY), subjects.job_all(STUDY, job_id),
                            *(subjects.site_cmds(STUDY, site) for site in SITES)])
    # Keep the admin events and this job's events and commands, in stream order.
    study = [line for line in stored
             if getattr(ev.STUDY_DECODER.decode(line), "job", job_id) == job_id]
    sites: dict[str, list[bytes]] = {}
    for site in SITES:
        raw = await _stored(bus, subjects.site_stream(site).name, [])
        sites[site] = [line for line in raw
                       if getattr(ev.SITE_DECODER.decode(line), "job", None) == job_id]
    return History(study=study, sites=sites)


async def record(out: Path, only: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fed = EmbeddedFederation(dir=Path(tmp) / "fed", sites=("hub", *SITES), heartbeat_s=0.2)
        fed.start()
        try:
            await fed.wait_healthy(60)
            assert fed.nats is not None
            client = await Client.connect(Context(nats_url=fed.nats.url, study=STUDY,
                                                  actor=DEFAULT_ADMIN, **fed.client_options()))
            bus = await fed.bus()
            try:
                for name, scenario in SCENARIOS.items():
                    if only and name not in only:
                        continue
                    job_id = await scenario(fed, client, Path(tmp) / "jobs")
                    final = await client.wait(job_id, timeout=120)
                    print(f"{name}: {job_id} ended {final.state} ({final.cause})")
                    _save(out / name, await _history(bus, job_id))
            finally:
                await bus.close()
                await client.close()
        finally:
            fed.stop()


def _save(folder: Path, history: History) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.jsonl"):
        old.unlink()
    (folder / "study.jsonl").write_bytes(b"\n".join(history.study) + b"\n")
    for site, lines in history.sites.items():
        if lines:
            (folder / f"site-{site}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    expected = msgspec.json.encode(expected_of(history))
    (folder / "expected.json").write_bytes(msgspec.json.format(expected, indent=2) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "replay" / "histories")
    parser.add_argument("--only", action="append", default=[], choices=sorted(SCENARIOS),
                        help="record only this history (repeatable)")
    args = parser.parse_args()
    asyncio.run(record(args.out, args.only))


if __name__ == "__main__":
    main()
