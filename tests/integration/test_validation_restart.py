"""A validation cut off by a validator crash ends as `error` when the validator comes back,
so whoever follows it gets an answer instead of waiting for its timeout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path

from cairn import api, subjects
from cairn.client.validation import follow
from cairn.events import ValidationStarted
from cairn.runtime.embedded import DEFAULT_ADMIN
from tests.fixtures.federation import make_federation
from tests.integration.test_validation import federation_events


async def test_a_run_cut_off_by_a_validator_crash_ends_as_error(tmp_path: Path) -> None:
    fed = make_federation(tmp_path)
    fed.start()
    site_a = fed.process("site-site-a").proc.pid
    try:
        await fed.wait_healthy(60)
        assert fed.nats is not None
        bus = await fed.bus(kit=DEFAULT_ADMIN)  # a project admin starts validations
        try:
            since = datetime.now(UTC)
            envelope = api.Envelope(request=api.ValidationRun(
                site="site-a", recipe="cpu-linux-process"), actor=DEFAULT_ADMIN)
            reply = json.loads(await bus.request(subjects.api_validation("run"),
                                                 api.encode_envelope(envelope), timeout=30))
            run = reply["result"]["run"]
            subject = subjects.validation_all("site-a", "cpu-linux-process")
            for _ in range(500):  # until the run is under way
                if any(isinstance(e, ValidationStarted) and e.run == run
                       for e in await federation_events(fed, subject)):
                    break
                await asyncio.sleep(0.02)
            # Hold site-a (its check jobs cannot finish) and crash the hub's parent, which
            # runs the validator; then bring it back.
            os.kill(site_a, signal.SIGSTOP)
            fed.kill("coordinator")
            fed.respawn("coordinator")
            events = await follow(bus, "site-a", "cpu-linux-process", run, since, timeout=60)
        finally:
            os.kill(site_a, signal.SIGCONT)
            await bus.close()
    finally:
        fed.stop()
    done = events[-1]
    assert (done.run, done.status) == (run, "error")
    assert "restarted during this run" in done.message and "run it again" in done.message
    assert [type(e).__name__ for e in events].count("ValidationCompleted") == 1
