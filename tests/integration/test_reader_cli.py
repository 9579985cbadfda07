"""A reader's kit with the `cairn` command: it tails and replays its study, is told at once
(exit 5) that it may ask nothing, and is cut off when revoked."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from cairn import subjects
from cairn.bus import replay
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cli_run import run_bounded
from tests.integration.cp_helpers import write_job
from tests.integration.security_helpers import connect_as, refused_at_connect

CLI_TIMEOUT_S = 60.0


async def _cairn(*args: str | Path, context: Path | None = None) -> tuple[int, str, str]:
    """`cairn ARGS` with only the reader's context file (no admin credential around)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CAIRN_CREDS", "CAIRN_TLS_CA", "CAIRN_NATS_URL",
                                "CAIRN_STUDY", "CAIRN_ACTOR"))}
    if context is not None:
        env["CAIRN_CONTEXT"] = str(context)
    return await run_bounded(sys.executable, "-m", "cairn", *args, env=env,
                             timeout_s=CLI_TIMEOUT_S)


async def _stored_seqs(fed: EmbeddedFederation, job: str) -> list[int]:
    """The stream sequences of the job's stored events, read as the hub."""
    bus = await fed.bus()
    try:
        return [r.seq async for r in replay(bus, subjects.study_stream("demo").name,
                                            filters=[subjects.job_all("demo", job)])]
    finally:
        await bus.close()


@pytest.mark.timeout(240)
async def test_a_readers_context_tails_and_replays_its_study_and_asks_nothing(
        federation: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    fed = federation
    assert fed.trust is not None
    rc, out, err = await _cairn("provision", "reader", "dashboard@org-a", "--study", "demo",
                                "--root", fed.trust.dir, "-o", "json")
    assert rc == 0, err
    made = json.loads(out)
    context = Path(made["context"])
    job = await client.submit(write_job(job_dir))
    assert (await client.wait(job, timeout=60)).state == "completed"
    stored = await _stored_seqs(fed, job)

    rc, out, err = await _cairn("events", "tail", "--all", "--job", job, "-o", "json",
                                context=context)
    assert rc == 0, err
    assert [json.loads(line)["seq"] for line in out.splitlines()] == stored

    rc, out, err = await _cairn("replay", "--job", job, "-o", "json", context=context)
    assert rc == 0, err
    replayed = json.loads(out)
    assert replayed["state"]["jobs"][job]["state"] == "completed"
    assert [e["seq"] for e in replayed["timeline"]] == stored

    # What needs the coordinator is refused before anything is sent, exit 5 (a request the
    # broker dropped would end as a timeout, exit 8, after waiting for its answer).
    for command in (("job", "list"), ("job", "show", job), ("site", "list"),
                    ("job", "submit", str(job_dir / "job.yaml"))):
        rc, _, err = await _cairn(*command, context=context)
        assert rc == 5, (command, err)
        assert "reader dashboard@org-a" in err and "cairn events tail" in err, err
        assert "Traceback" not in err
    assert await _stored_seqs(fed, job) == stored, "nothing was sent"

    # Revoked: the open connection is cut, and the kit is refused from then on.
    creds = Path(made["creds"])
    live = await connect_as(fed, creds)
    rc, out, err = await _cairn("provision", "revoke", "dashboard@org-a", "--root",
                                fed.trust.dir)
    assert rc == 0, err
    await asyncio.wait_for(live.closed.wait(), 10)
    assert await refused_at_connect(fed, creds)
    rc, _, err = await _cairn("events", "tail", context=context)
    assert rc == 5 and "refused this connection" in err, err
    # ... and its name is not handed out again.
    rc, _, err = await _cairn("provision", "reader", "dashboard@org-a", "--study", "demo",
                              "--root", fed.trust.dir)
    assert rc == 6 and "revoked" in err, err
