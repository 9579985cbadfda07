"""Study isolation: a job of study B really runs on a site whose runtime file admits B, while a
session of study A lists, shows, cancels, reads logs and results and tails events, through the
Python client and the `cairn` command, and sees none of it. B's own session sees all of it
(the positive control: what A misses is there to be seen)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.client import Client
from cairn.errors import NotFound
from cairn.events import StudyAdmin
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.fixtures.federation import connect
from tests.integration.cli_run import cairn
from tests.integration.cp_helpers import (
    default_policy,
    release_workers,
    rewrite_runtime,
    worker_files,
    write_job,
)
from tests.integration.insiders import until_running

SECRET_LINE = "secret-line-of-study-b"
SECRET_VALUE = "secret-value-of-study-b"
HELD = f'''\
import asyncio, os, pathlib
from cairn.worker import Worker, main

async def run(w: Worker) -> None:
    print("{SECRET_LINE}", flush=True)
    pathlib.Path("secret.txt").write_text("{SECRET_VALUE}")
    await w.result({{"secret": "{SECRET_VALUE}"}}, files=["secret.txt"])
    pathlib.Path("started").write_text(f"{{os.getpid()}}\\n")  # in its own folder
    release = pathlib.Path("release")
    for _ in range(1200):  # held until the test has looked, 120 s at most
        if release.exists():
            return
        await asyncio.sleep(0.1)
    raise SystemExit("never released")

main(run)
'''


async def test_a_session_of_another_study_sees_nothing_of_a_running_job(
        federation: EmbeddedFederation, client: Client, job_dir: Path, tmp_path: Path) -> None:
    policy = default_policy(federation, "site-a")
    await rewrite_runtime(federation, "site-a", {"demo": policy, "other": policy})
    await client.study_create("other", ["site-a"], [StudyAdmin(name="eve@org-site-a",
                                                               org="org-site-a", role="lead")])
    b = await connect(federation, study="other", actor="eve@org-site-a")
    job_b = ""
    try:
        spec = write_job(job_dir, name="secret-b", script=HELD)
        job_b = await b.submit(spec)
        await worker_files(federation, job_b, "started")
        # The worker's own file says it runs; the coordinator says so once it has folded the
        # worker's start, which may come later on a busy machine.
        await until_running(b, job_b)

        # Study A's session (the federation's project admin, even) sees none of it.
        await _sees_nothing(client, federation, job_b, tmp_path / "fetch-a")

        # B's own session sees all of it.
        assert job_b in {j.job for j in await b.jobs()}
        logs = "".join([c.data.decode() async for c in b.logs(job_b)])
        assert SECRET_LINE in logs
        assert any([e.job == job_b async for e in b.events(job=job_b)])
        code, out, err = await cairn(federation, "job", "show", job_b, "-o", "json",
                                   study="other", actor="eve@org-site-a")
        assert code == 0 and json.loads(out)["job"] == job_b, (out, err)

        release_workers(federation, job_b)
        final = await b.wait(job_b, timeout=60)
        # A's cancel changed nothing: the job ran to its end.
        assert final.state == "completed", final
        assert [r.value for r in final.results] == [{"secret": SECRET_VALUE}]
        fetched = await b.fetch(job_b, tmp_path / "fetch-b")
        assert any(p.read_text() == SECRET_VALUE for p in fetched if p.name == "secret.txt")
        # And once it ended, A still sees nothing.
        await _sees_nothing(client, federation, job_b, tmp_path / "fetch-a-after")
    finally:
        if job_b:
            release_workers(federation, job_b)
        await b.close()


async def _sees_nothing(a: Client, fed: EmbeddedFederation, job_b: str, dest: Path) -> None:
    assert job_b not in {j.job for j in await a.jobs()}
    with pytest.raises(NotFound):
        await a.job(job_b)
    with pytest.raises(NotFound):
        await a.cancel(job_b)
    with pytest.raises(NotFound):
        [c async for c in a.logs(job_b)]
    with pytest.raises(NotFound):
        await a.fetch(job_b, dest)
    tail = [e async for e in a.events()]
    assert tail, "study A's own events are there to be seen"
    assert not [e for e in tail if e.job == job_b or job_b in e.summary]
    assert not [e async for e in a.events(job=job_b)]

    as_a = {"study": "demo", "actor": DEFAULT_ADMIN}
    code, out, _ = await cairn(fed, "job", "list", "-o", "json", **as_a)
    assert code == 0 and job_b not in out
    for verb in ("show", "cancel", "logs", "fetch"):
        args = ["job", verb, job_b] + (["--dest", str(dest)] if verb == "fetch" else [])
        code, out, err = await cairn(fed, *args, **as_a)
        assert code == 4, (verb, code, out, err)
        assert SECRET_LINE not in out + err and "Traceback" not in err
    code, out, _ = await cairn(fed, "events", "tail", "--all", "-o", "json", **as_a)
    assert code == 0 and job_b not in out and SECRET_LINE not in out
    code, out, _ = await cairn(fed, "events", "tail", "--all", "--job", job_b, "-o", "json",
                               **as_a)
    assert code in (0, 4) and job_b not in out.replace(f"job {job_b}", "")
