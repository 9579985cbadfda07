"""The API's fold of a study stream (`cairn.httpapi.feeds`), on a recorded history: the same
state the services fold, each job's own timeline, its metrics, and a listener that resumes
after a sequence and then gets each new entry once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from cairn import events as ev
from cairn.bus import Replayed
from cairn.state.view import fold
from tests.conftest import REPO

pytest.importorskip("litestar", reason="the HTTP API is not installed (make setup)")

from cairn.httpapi.feeds import StudyFeed, listen  # noqa: E402

HISTORY = REPO / "tests" / "replay" / "histories" / "completed" / "study.jsonl"


def _replayed() -> list[Replayed[object]]:
    lines = [line for line in HISTORY.read_bytes().splitlines() if line.strip()]
    return [Replayed(seq=n, subject="", time=None, event=ev.STUDY_DECODER.decode(line),
                     raw=line) for n, line in enumerate(lines, 1)]


def test_the_feed_folds_as_the_services_fold() -> None:
    items = _replayed()
    feed = StudyFeed(name="demo")
    for item in items:
        feed.apply(item)
    folded = fold(i.event for i in items)
    assert feed.jobs == folded.jobs and feed.study == folded.study
    (job,) = feed.jobs
    assert [e.seq for e in feed.by_job[job]] == [e.seq for e in feed.timeline if e.job == job]
    assert feed.last_seq == len(items)


async def test_a_listener_resumes_after_a_sequence_and_gets_each_new_entry_once() -> None:
    items = _replayed()
    feed = StudyFeed(name="demo")
    for item in items[:6]:
        feed.apply(item)
    got: list[int] = []

    async def read() -> None:
        async for e in listen(feed, 4):
            got.append(e.seq)
            if e.seq == len(items):
                return

    reader = asyncio.create_task(read())
    while len(got) < 2:  # the kept entries past 4 first
        await asyncio.sleep(0)
    for item in items[6:]:
        feed.apply(item)
    await asyncio.wait_for(reader, 5)
    assert got == list(range(5, len(items) + 1))
    assert not feed.listeners


def test_metrics_are_kept_per_job_and_round() -> None:
    feed = StudyFeed(name="demo")
    for item in _replayed():
        feed.apply(item)
    (job,) = feed.jobs
    for step in (1, 2):
        metric = ev.WorkerMetric(id=f"m{step}", at=datetime.now(UTC), study="demo",
                                 source="worker@site-a", job=job, site="site-a",
                                 role="client", step=step, values={"accuracy": step / 10})
        feed.apply(Replayed(seq=100 + step, subject="", time=None, event=metric, raw=b""))
    assert [(p.step, p.values) for p in feed.metrics[job]] == [
        (1, {"accuracy": 0.1}), (2, {"accuracy": 0.2})]
