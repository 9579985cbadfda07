"""How a job with a server role ends, on a real federation: a client still running when the
server finished gets the job's end grace, is then stopped with cause `outlived-server` (never
`cancelled`), and the job is `completed` only after that client's exit was reported."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cairn import events as ev
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from cairn.state.job import JobState
from tests.integration.cp_helpers import study_events

# The server ends once the lingering client is up (so that client surely outlives it): the
# client says so on the job's data plane (sandboxed workers share no folder).
SERVER = """\
from cairn.worker import Worker, main


async def run(w: Worker) -> None:
    await w.receive("up", 120)
    print("server done", flush=True)

main(run)
"""
# The client at site-a ends at once; the one at site-b never ends by itself, and records the
# SIGTERM it gets (so the test sees it was asked to stop, not killed).
CLIENT = """\
import os, pathlib, signal, time

from cairn.worker import Worker, main

workdir = pathlib.Path(os.environ["CAIRN_WORKDIR"])
if os.environ["CAIRN_SITE"] == "site-a":
    raise SystemExit(0)


def stop(signum, frame):
    (workdir / "terminated").write_text(signal.Signals(signum).name)
    os._exit(128 + signum)


async def run(w: Worker) -> None:
    signal.signal(signal.SIGTERM, stop)
    await w.send("server", 0, "up", {})
    print("lingering", flush=True)
    time.sleep(600)

main(run)
"""


def write_fl_job(job_dir: Path, end_grace: str) -> Path:
    app = job_dir / "app"
    app.mkdir(parents=True, exist_ok=True)
    (app / "server.py").write_text(SERVER)
    (app / "client.py").write_text(CLIENT)
    path = job_dir / "job.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: lingering-client
        code: ./app
        roles:
          server:
            entrypoint: python server.py
            resources: {{cpus: 1, memory: 256Mi}}
          client:
            entrypoint: python client.py
            resources: {{cpus: 1, memory: 256Mi}}
            sites: [site-a, site-b]
        end_grace: {end_grace}
        """))
    return path


async def test_a_client_that_outlives_the_server_is_stopped_after_the_grace(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    job_id = await client.submit(write_fl_job(job_dir, "2s"))
    seen: list[JobState] = []
    async for state in client.watch(job_id, poll=0.1, timeout=90):
        seen.append(state)
    final = seen[-1]
    assert final.state == "completed", final
    # While it waited, the job said so: running, the server done, site-b's client still up.
    waiting = [s for s in seen if s.ending_at is not None and not s.terminal]
    assert waiting, [s.state for s in seen]
    assert all(s.state == "running" for s in waiting)
    assert any(s.workers["site-b/client/1"].state == "running" for s in waiting)
    server = final.workers["hub/server/0"]
    assert (server.exit_code, server.cause) == (0, None)
    early = final.workers["site-a/client/0"]
    assert (early.exit_code, early.cause) == (0, None)
    stopped = final.workers["site-b/client/1"]
    assert (stopped.exit_code, stopped.cause) == (143, "outlived-server"), stopped
    assert stopped.message.startswith("stopped after the server role finished"), stopped
    records = list((federation.site_dir("site-b") / "work").glob(
        f"workers/{job_id}*/terminated"))
    assert [r.read_text() for r in records] == ["SIGTERM"]

    # The whole study stream: the coordinator's commands to sites are not under the job's
    # own subjects.
    events = [e for e in await study_events(federation) if getattr(e, "job", None) == job_id]
    order = [(ev.tag_of(e), getattr(e, "site", None)) for e in events
             if isinstance(e, ev.JobEnding | ev.CancelCommand | ev.WorkerExited
                           | ev.JobCompleted)]
    ending = next(e for e in events if isinstance(e, ev.JobEnding))
    assert ending.end_grace_s == 2.0 and "site-b/client/1" in ending.waiting
    stops = [e for e in events if isinstance(e, ev.CancelCommand)]
    assert {(s.site, s.reason) for s in stops} == {("site-b", "outlived-server")}
    # The stop came no sooner than the grace after the wait began.
    assert (stops[0].at - ending.at).total_seconds() >= 2.0
    assert order.index(("worker.exited", "site-b")) < order.index(("job.completed", None))
    assert order[-1] == ("job.completed", None)
