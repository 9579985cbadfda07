"""What it costs a launcher to find a launch's deploy command, against how long the study's
history is, on one private nats-server.

- before: the guard as it was, a replay of the site's deploy commands of the study on every
  launch (`cairn.bus.replay` filtered on the site's deploy subject), looking for the match;
- indexed: the launcher's index now (`cairn.launcher.studies`): a launch whose command the
  consumer has indexed (no I/O), and one that arrives first (the catch-up read of what the
  consumer has not handled: one message);
- restart: opening the study again from what the index stored in KV (its mark), which reads
  only what came after it.

The history holds `n` deploy commands of launches that ran (the index does not keep them).
`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from typing import Any

from cairn import subjects
from cairn.bus import Bus, kv, replay
from cairn.events import STUDY_DECODER, DeployCommand, StudyCreated, now
from cairn.launcher.records import IndexedDeploy, IndexMark, mark_key
from cairn.launcher.studies import Studies
from cairn.runtime.natsserver import NatsServer
from cairn.runtime.service import Runtime, ServiceConfig

HISTORY = (0, 1_000, 10_000)
SAMPLES = 20
STUDY, SITE = "bench", "site-a"


def progress(message: str) -> None:
    print(f"[bench guard] {message}", file=sys.stderr, flush=True)


def _deploy(n: int) -> DeployCommand:
    return DeployCommand(id=f"d-{n}", at=now(), source="coordinator@hub", study=STUDY,
                         job=f"j-{n}", site=SITE, role="client", entrypoint="python main.py",
                         params={"n": n})


def _launch_id(n: int) -> str:
    return f"j-{n}/{SITE}/client/0/0"


async def _publish(bus: Bus, first: int, count: int) -> None:
    for i in range(first, first + count):
        await bus.publish_async(_deploy(i))
    await bus.flush_publishes(timeout=120)


async def _before(bus: Bus, launch_id: str) -> float:
    """One launch's lookup as the guard did it: the whole history, every time."""
    t0 = time.perf_counter()
    found = None
    async for item in replay(bus, subjects.study_stream(STUDY).name, STUDY_DECODER,
                             filters=[subjects.site_cmd(STUDY, SITE, "deploy")]):
        if isinstance(item.event, DeployCommand) and item.event.job == launch_id.split("/")[0]:
            found = item.event
    assert found is not None
    return time.perf_counter() - t0


async def _studies(rt: Runtime, launched: set[str]) -> Studies:
    bucket = subjects.kv_launches(SITE)
    deploys = await kv(rt.bus, bucket, IndexedDeploy)
    marks = await kv(rt.bus, bucket, IndexMark)
    studies = Studies(rt, SITE, deploys, marks, launched=launched.__contains__)
    mark = await marks.get(mark_key(STUDY))
    studies.restore({}, {STUDY: mark} if mark else {})
    return studies


async def _stored_up_to(rt: Runtime, seq: int) -> None:
    marks = await kv(rt.bus, subjects.kv_launches(SITE), IndexMark)
    deadline = time.monotonic() + 300
    while (mark := await marks.get(mark_key(STUDY))) is None or mark.seq < seq:
        assert time.monotonic() < deadline, "the index's consumer did not catch up"
        await asyncio.sleep(0.05)


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 3)


async def _measure(url: str, n: int) -> dict[str, Any]:
    bus = await Bus.connect(url, name="bench-guard")
    rt = Runtime(bus, ServiceConfig(), SITE)
    try:
        await bus.ensure_federation()
        await bus.ensure_study(STUDY)
        await bus.publish(StudyCreated(id="created", at=now(), source="coordinator@hub",
                                       study=STUDY, name=STUDY, sites=[SITE]))
        await _publish(bus, 0, n)
        launched = {_launch_id(i) for i in range(n)}
        progress(f"history {n}: published")
        before = [await _before(bus, _launch_id(max(0, n - 1)) if n else _launch_id(0))
                  for _ in range(min(SAMPLES, 5))] if n else []
        t0 = time.perf_counter()
        studies = await _studies(rt, launched)
        await studies.scan()  # insecure: every study; reads the history once
        cold = time.perf_counter() - t0
        first = n
        await _publish(bus, first, 1)
        await _stored_up_to(rt, n + 2)
        hit, miss = [], []
        for i in range(SAMPLES):
            t0 = time.perf_counter()
            assert await studies.deploy_for(STUDY, _launch_id(first + i)) is not None
            hit.append(time.perf_counter() - t0)
            await _publish(bus, first + i + 1, 1)
            # Asked at once: the consumer has not indexed it, so the launch reads it itself.
            t0 = time.perf_counter()
            assert await studies.deploy_for(STUDY, _launch_id(first + i + 1)) is not None
            miss.append(time.perf_counter() - t0)
        await _stored_up_to(rt, n + 2 + SAMPLES)
    finally:
        await rt.close()
        await bus.close()
    bus = await Bus.connect(url, name="bench-guard-restart")
    rt = Runtime(bus, ServiceConfig(), SITE)
    try:
        t0 = time.perf_counter()
        studies = await _studies(rt, launched)
        await studies.scan()
        restart = time.perf_counter() - t0
    finally:
        await rt.close()
        await bus.close()
    return {"history": n, "before_ms": _ms(before) if before else None,
            "indexed_hit_ms": _ms(hit), "indexed_catch_up_ms": _ms(miss),
            "first_open_s": round(cold, 3), "restart_open_ms": round(restart * 1000, 3)}


async def run() -> dict[str, Any]:
    rows = []
    for n in HISTORY:
        with tempfile.TemporaryDirectory() as tmp:
            server = NatsServer(tmp).start()
            try:
                rows.append(await _measure(server.url, n))
                progress(str(rows[-1]))
            finally:
                server.stop()
    return {"samples": SAMPLES, "by_history": rows}


if __name__ == "__main__":
    import json

    print(json.dumps(asyncio.run(run()), indent=2))
