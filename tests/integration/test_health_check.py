"""`python -m cairn.runtime.health`: the probe containers and Kubernetes run beside a parent."""

from __future__ import annotations

import asyncio
import os
import sys

from cairn.runtime.embedded import EmbeddedFederation


async def probe(fed: EmbeddedFederation, *args: str) -> tuple[int, str]:
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, **fed.client_env()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn.runtime.health", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode()


async def test_the_probe_says_which_services_answer(federation: EmbeddedFederation) -> None:
    code, text = await probe(federation, "agent", "launcher", "--site", "site-a")
    assert code == 0 and "ready: agent, launcher at site-a" in text
    code, text = await probe(federation, "coordinator", "--site", "hub")
    assert code == 0, text
    # A site that runs nothing: no answer, exit 7 (unavailable), one line.
    code, text = await probe(federation, "agent", "--site", "site-z")
    assert code == 7, text
    assert text.count("\n") == 1 and "cairn.health.agent.site-z" in text
