"""Helpers for the orphan tests: a site's launcher SIGKILLed right after a submit (the
`CAIRN_TEST_DIE_AFTER_SUBMIT` hook of `cairn.launcher.orphans`), before it recorded what it
started, on any backend."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from cairn import events as ev
from cairn.runtime.embedded import EmbeddedFederation
from cairn.state.job import JobState
from tests.integration.cp_helpers import study_events

PARENT = "site-site-a"  # site-a's agent and launcher


async def events_until(fed: EmbeddedFederation, job: str, kind: type, timeout: float = 60
                       ) -> list[object]:
    """The job's events once one of `kind` at site-a is among them."""
    deadline = time.monotonic() + timeout
    while True:
        seen = await study_events(fed, job=job)
        if any(isinstance(e, kind) and e.site == "site-a" for e in seen):  # type: ignore[attr-defined]
            return seen
        assert time.monotonic() < deadline, f"{job}: no {kind.__name__} at site-a"
        await asyncio.sleep(0.2)


async def crash_after_submit(fed: EmbeddedFederation, flag: Path, job: str) -> str:
    """Wait for site-a's parent to die on its submit of `job`; the launch id it died on,
    which it had said was launching but never running."""
    await asyncio.to_thread(fed.process(PARENT).proc.wait, 90)
    assert not flag.exists(), "the hook fired"
    seen = await events_until(fed, job, ev.WorkerLaunching)
    launch_id = next(e.launch_id for e in seen
                     if isinstance(e, ev.WorkerLaunching) and e.site == "site-a")
    assert not any(isinstance(e, ev.WorkerRunning) and e.site == "site-a" for e in seen)
    return launch_id


def assert_stopped_as_orphan(ended: JobState, seen: list[object], launch: str) -> None:
    """The job ended failed (its other site's worker failed it) and site-a's worker, found
    after the restart, was cancelled once and reported orphaned."""
    assert ended.state == "failed", ended
    exits = [e for e in seen if isinstance(e, ev.WorkerExited) and e.site == "site-a"]
    assert len(exits) == 1, exits
    assert exits[0].launch_id == launch
    assert exits[0].reason == "cancelled", exits[0]
    assert exits[0].message.startswith("orphaned: job over: failed"), exits[0].message


def assert_adopted(ended: JobState, seen: list[object], launch: str) -> ev.WorkerRunning:
    """The job completed, its worker launched once, reported running once (adopted after
    the restart) and exited 0; that running report."""
    assert ended.state == "completed", ended
    assert [e.launch_id for e in seen if isinstance(e, ev.WorkerLaunching)] == [launch]
    running = [e for e in seen if isinstance(e, ev.WorkerRunning)]
    assert len(running) == 1 and running[0].launch_id == launch, running
    exited = [e for e in seen if isinstance(e, ev.WorkerExited)]
    assert [(e.exit_code, e.reason) for e in exited] == [(0, None)], exited
    return running[0]
