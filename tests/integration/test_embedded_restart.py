"""`cairn up` looks after its federation: kill -9 of the coordinator, of a site parent and of
the nats-server while a job runs; `cairn up` stays up, restarts each, the job completes once
and nothing is launched twice. A second `cairn up` on the same --dir keeps the NATS port; one
while the first runs (or while what a killed one started still runs) is refused."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn import events as ev
from cairn import subjects
from cairn.bus import Bus, replay
from cairn.client import Client
from cairn.errors import Timeout, Unavailable
from cairn.runtime import context
from cairn.runtime.natsserver import find_nats_server
from cairn.state.job import JobState
from tests.integration.cp_helpers import processes, write_job

# Each worker start leaves a token of its own (a pid would not do: in its sandbox every
# worker's pid is the same small number).
SLEEPER = """\
import os, pathlib, sys, time
pathlib.Path(os.environ["CAIRN_WORKDIR"], "started").write_text(os.urandom(8).hex())
time.sleep(float(sys.argv[1]))
"""
ROLES = """\
    roles:
      client:
        entrypoint: python main.py 30
        resources: {cpus: 1, memory: 256Mi}
    """


@dataclass
class Up:
    """A `cairn up` subprocess and what it printed."""

    proc: subprocess.Popen[str]
    dir: Path
    ctx: Path
    err_log: Path
    out_log: Path

    def out(self) -> str:
        return self.out_log.read_text()

    def err(self) -> str:
        return self.err_log.read_text()

    def pid_of(self, name: str) -> int:
        found = re.search(rf"^  {re.escape(name)}\s+pid (\d+)", self.out(), re.M)
        assert found, self.out()
        return int(found.group(1))

    async def wait_for(self, pattern: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.err(), re.M):
            assert self.proc.poll() is None, f"cairn up exited: {self.err()}"
            assert time.monotonic() < deadline, f"no {pattern!r} in: {self.err()}"
            await asyncio.sleep(0.2)


def start_up(dir_: Path, logs: Path) -> Up:
    env = {**os.environ, "CAIRN_CONTEXT": str(logs / "context.yaml")}
    env.pop("CAIRN_NATS_URL", None)
    out, err = logs / "up.out", logs / "up.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "cairn", "up", "--dir", str(dir_),
                                 "--timeout", "120"], stdout=o, stderr=e, text=True, env=env,
                                start_new_session=True)
    return Up(proc, dir_, logs / "context.yaml", err, out)


async def wait_context(up: Up, timeout: float = 150) -> context.Context:
    deadline = time.monotonic() + timeout
    while True:
        ctx = context.load(up.ctx, required=False) if up.ctx.exists() else None
        if ctx is not None and "files" in up.out():
            return ctx
        assert up.proc.poll() is None, f"cairn up exited: {up.err()}"
        assert time.monotonic() < deadline, "cairn up did not come up"
        await asyncio.sleep(0.2)


def stop_up(up: Up) -> None:
    if up.proc.poll() is None:
        up.proc.send_signal(signal.SIGTERM)
        try:
            up.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.proc.pid, signal.SIGKILL)
            up.proc.wait(10)


def nats_pid(fed_dir: Path) -> int:
    """The nats-server of `fed_dir` (ours: started by this test's `cairn up`); its command
    names the store, or the config file, both under `fed_dir`."""
    mine = str(fed_dir).encode()
    found = processes(lambda argv: argv[0].endswith(b"nats-server")
                      and any(a.startswith(mine) for a in argv))
    assert found, f"no nats-server for {fed_dir}"
    return found[0]


@pytest.fixture
async def up(tmp_path: Path) -> AsyncIterator[Up]:
    try:
        find_nats_server()
    except Unavailable as exc:
        pytest.skip(str(exc))
    running = start_up(tmp_path / "fed", tmp_path)
    try:
        yield running
    finally:
        stop_up(running)


# Three restarts in a row on a loaded two-core machine: more than the default 120 s budget.
@pytest.mark.timeout(480)
async def test_kill_9_of_each_piece_while_a_job_runs(up: Up, tmp_path: Path) -> None:
    ctx = await wait_context(up)
    client = await Client.connect(ctx)
    try:
        job_dir = tmp_path / "job"
        job_id = await client.submit(write_job(job_dir, script=SLEEPER, roles=ROLES))
        await _wait_workers_running(client, job_id)
        pids = await _worker_starts(up.dir, job_id, 2)

        os.kill(up.pid_of("coordinator"), signal.SIGKILL)
        await up.wait_for(r"^coordinator restarted \(pid \d+\)")
        os.kill(up.pid_of("site-site-a"), signal.SIGKILL)
        await up.wait_for(r"^site-site-a restarted \(pid \d+\)")
        os.kill(nats_pid(up.dir), signal.SIGKILL)
        await up.wait_for(r"^nats-server restarted on " + re.escape(ctx.nats_url))

        final = await _wait_ended(ctx, job_id)
        assert final.state == "completed", (final.cause, final.message, final.workers)
        events = await _study_events(ctx, job_id)
        launches = [e for e in events if isinstance(e, ev.WorkerLaunching)]
        exits = [e for e in events if isinstance(e, ev.WorkerExited)]
        assert len(launches) == 2, "nothing is launched twice"
        assert sorted(e.site for e in exits) == ["site-a", "site-b"]
        assert all(e.exit_code == 0 for e in exits)
        assert sorted(await _worker_starts(up.dir, job_id, 2)) == sorted(pids), \
            "the same two workers"
        completed = [e for e in events if isinstance(e, ev.JobCompleted)]
        assert len(completed) == 1, "the job completes once"
    finally:
        await client.close()
    assert up.proc.poll() is None, "cairn up stays up"
    assert up.ctx.exists(), "the context file stays while cairn up runs"
    for line in ("coordinator (pid", "site-site-a (pid", "nats-server exited"):
        assert line in up.err()


async def test_cairn_up_again_on_the_same_dir_keeps_the_port(up: Up, tmp_path: Path) -> None:
    first = await wait_context(up)
    stop_up(up)
    assert up.proc.returncode == 0, up.err()
    (tmp_path / "again").mkdir()
    again = start_up(up.dir, tmp_path / "again")
    try:
        second = await wait_context(again)
        assert second.nats_url == first.nats_url
    finally:
        stop_up(again)


async def test_a_second_signal_while_stopping_does_not_cut_the_stop_short(
        up: Up, tmp_path: Path) -> None:
    """Ctrl-C pressed again (or `cairn down` and a SIGTERM at once) while the federation
    stops: the stop still finishes, and nothing of the federation is left running."""
    await wait_context(up)
    server = nats_pid(up.dir)
    up.proc.send_signal(signal.SIGTERM)
    up.proc.send_signal(signal.SIGINT)  # arrives while the first one's stop runs
    up.proc.wait(60)
    assert up.proc.returncode == 0, up.err()
    assert "stopping..." in up.err()
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)  # its nats-server was stopped too (and reaped: it was a child)


async def _wait_workers_running(client: Client, job_id: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = await client.job(job_id)
        if sum(w.state == "running" for w in job.workers.values()) >= 2:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"workers of {job_id} not running: {await client.job(job_id)}")


async def _wait_ended(ctx: context.Context, job_id: str, timeout: float = 240) -> JobState:
    """Poll the job until it ends, as a user would: right after the bus restarts services
    are still reconnecting, and a session whose connection the client library gave up on
    (it can, on an authorization error while the authority reconnects) is opened again."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            async with await Client.connect(ctx) as session:
                while time.monotonic() < deadline:
                    job = await session.job(job_id)
                    if job.terminal:
                        return job
                    await asyncio.sleep(0.5)
        except (Unavailable, Timeout) as exc:
            last = exc
            await asyncio.sleep(0.5)
    raise AssertionError(f"{job_id} did not end within {timeout:g}s: {last}")


async def _worker_starts(dir_: Path, job_id: str, count: int,
                         timeout: float = 60.0) -> list[str]:
    """The tokens the job's workers left as they started, once `count` of them have."""
    deadline = time.monotonic() + timeout
    while True:
        tokens = [text for started in (dir_ / "sites").glob(f"*/work/workers/{job_id}*/started")
                  if (text := started.read_text())]
        if len(tokens) >= count or time.monotonic() > deadline:
            return tokens
        await asyncio.sleep(0.05)


async def _study_events(ctx: context.Context, job_id: str) -> list[object]:
    bus = await Bus.connect(ctx.nats_url, creds=ctx.creds,
                            tls=context.tls_context(ctx.tls_ca, ctx.tls_cert, ctx.tls_key))
    try:
        return [r.event async for r in replay(bus, subjects.study_stream("demo").name,
                                              ev.STUDY_DECODER,
                                              filters=[subjects.job_all("demo", job_id)])
                if r.event is not None]
    finally:
        await bus.close()


def cairn_cmd(up: Up, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`cairn ARGS` with `up`'s context file, as the operator's second terminal runs it."""
    env = {**os.environ, "CAIRN_CONTEXT": str(up.ctx)}
    env.pop("CAIRN_NATS_URL", None)
    return subprocess.run([sys.executable, "-m", "cairn", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


def _files_of(dir_: Path) -> dict[str, bytes]:
    """What a second `cairn up` must not touch: config, port, context and lock files."""
    return {rel: (dir_ / rel).read_bytes()
            for rel in ("trust/server/nats.conf", "nats/port", "up.lock", "federation.yaml")}


async def test_a_second_cairn_up_in_the_same_dir_is_refused_and_touches_nothing(
        up: Up) -> None:
    ctx = await wait_context(up)
    before, nats_before, context_before = _files_of(up.dir), nats_pid(up.dir), up.ctx.read_bytes()
    for args in (("up", "--dir", str(up.dir), "--check"), ("up", "--dir", str(up.dir))):
        refused = cairn_cmd(up, *args)
        assert refused.returncode == 6, (args, refused.stderr)
        assert f"cairn up already runs in {up.dir} (pid {up.proc.pid}, NATS {ctx.nats_url})" \
            in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    assert _files_of(up.dir) == before, "nothing of the first federation was rewritten"
    assert up.ctx.read_bytes() == context_before
    assert nats_pid(up.dir) == nats_before, "no second nats-server on the same store"

    # Even a config rewritten under it (as a second `cairn up` of an older release did) does
    # not move the first federation's nats-server when it restarts: same port, and a log
    # line that says so.
    conf = up.dir / "trust" / "server" / "nats.conf"
    port = ctx.nats_url.rsplit(":", 1)[1]
    conf.write_text(conf.read_text().replace(f":{port}", ":1"))
    os.kill(nats_before, signal.SIGKILL)
    await up.wait_for(rf"^nats-server exited with -9; restarting it on port {port} ", 60)
    await up.wait_for(r"^nats-server restarted on " + re.escape(ctx.nats_url) + " ", 60)
    await up.wait_for(r"^every service answers again ", 60)
    listed = cairn_cmd(up, "site", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert "did not come back" not in up.err()


async def test_what_a_killed_cairn_up_left_running_blocks_the_next_until_cairn_down(
        up: Up) -> None:
    from cairn.runtime.dirlock import read_holder, stop_leftovers

    ctx = await wait_context(up)
    server = nats_pid(up.dir)
    up.proc.kill()  # `cairn up` alone: what it started runs on, each in its own session
    up.proc.wait(10)
    holder = read_holder(up.dir)
    assert holder is not None
    try:
        refused = cairn_cmd(up, "up", "--dir", str(up.dir), "--check")
        assert refused.returncode == 6, refused.stderr
        assert f"nats-server pid {server}" in refused.stderr, refused.stderr
        assert ctx.nats_url in refused.stderr
        assert nats_pid(up.dir) == server

        down = cairn_cmd(up, "down", "--dir", str(up.dir))
        assert down.returncode == 0, down.stderr
        assert f"nats-server (pid {server})" in down.stdout
        assert holder.leftovers() == []
        again = cairn_cmd(up, "up", "--dir", str(up.dir), "--check", "--timeout", "120",
                          timeout=180)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("healthy: ")
    finally:
        stop_leftovers(holder.leftovers())
