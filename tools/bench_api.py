"""`make bench` section `api`: the HTTP API and the dashboard, on a private nats-server.

- latency (p50, p99) of `GET /v1/studies/<s>/jobs` with 1,000 jobs (a page of 50 and one of
  500) and of one job's timeline: the study holds the recorded golden history of a completed
  job (tests/replay/histories/completed) 1,000 times over, under 1,000 job ids;
- bus to browser: an event published on the bus until the job's page in Chromium shows it
  (the page's live view: SSE, then the page's live parts rendered again), target < 100 ms;
  and bus to an SSE client alone;
- the dashboard's first load of `/recipes` with a catalog of 500 recipes (its first page of
  100 rows; target < 300 ms).

The browser figures need Debian's `chromium` and Playwright (`make setup`); without them they
are reported as skipped.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "replay" / "histories" / "completed" / "study.jsonl"
STUDY = "bench"
JOBS = 1000
REQUESTS = 200


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(p99 * 1000, 2), "n": len(ordered)}


def _history(job_index: int) -> list[bytes]:
    """The golden completed job's events, as job `j-bench<index>` of study `bench`."""
    lines = [line for line in GOLDEN.read_bytes().splitlines() if line.strip()]
    original = b"j-01m8rfqa8n4kx3r5gshb5t44jj"
    job = f"j-bench{job_index:05d}".encode()
    out = []
    for n, line in enumerate(lines):
        if b'"type":"study.created"' in line and job_index:
            continue
        line = line.replace(original, job).replace(b'"study":"demo"', b'"study":"bench"')
        line = line.replace(b'"name":"demo"', b'"name":"bench"')
        out.append(line.replace(b'"id":"', f'"id":"b{job_index}-{n}-'.encode(), 1))
    return out


async def _fill(bus: Any) -> None:
    from cairn import events as ev
    from cairn import subjects

    await bus.ensure_study(STUDY)
    for index in range(JOBS):
        for line in _history(index):
            event = ev.STUDY_DECODER.decode(line)
            await bus.js.publish(subjects.subject_of(event), line,
                                 headers={"Nats-Msg-Id": event.id})


def _catalog(count: int) -> Any:
    sys.path.insert(0, str(REPO / "tools"))
    from bench_recipes import _catalog as generated

    return generated(count, random.Random(7))


async def _serve(bus: Any) -> tuple[Any, str]:
    from cairn.httpapi.recipes import RecipeCatalog
    from cairn.httpapi.service import HttpApiService
    from cairn.runtime.service import Runtime, ServiceConfig

    config = ServiceConfig(nats_url="", options={"listen": "127.0.0.1:0"})
    service = HttpApiService(config)
    await service.start(Runtime(bus, config, "hub"))
    assert service._ctx is not None
    from cairn.evidence.trust import TrustList

    service._ctx.recipes = RecipeCatalog(_catalog(500), TrustList())
    return service, service.url


async def _latency(url: str) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        probes = {"jobs_page_50": f"/v1/studies/{STUDY}/jobs?limit=50",
                  "jobs_page_500": f"/v1/studies/{STUDY}/jobs?limit=500",
                  "job_timeline": f"/v1/studies/{STUDY}/jobs/j-bench00500/timeline",
                  "job": f"/v1/studies/{STUDY}/jobs/j-bench00500"}
        total = (await http.get(probes["jobs_page_50"])).json()["total"]
        out["jobs"] = total
        for name, path in probes.items():
            samples = []
            for _ in range(REQUESTS):
                started = time.perf_counter()
                answer = await http.get(path)
                samples.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
            out[name] = _ms(samples)
    return out


def _metric(job: str, step: int) -> Any:
    from datetime import UTC, datetime

    from cairn.events import WorkerMetric

    return WorkerMetric(id=f"bench-metric-{job}-{step}-{time.time_ns()}", at=datetime.now(UTC),
                        study=STUDY, source="worker@site-a", job=job, site="site-a",
                        role="client", rank=0, step=step,
                        values={"accuracy": 0.5 + step / 1000, "loss": 1.0 / step})


async def _sse(bus: Any, url: str, rounds: int = 30) -> dict[str, Any]:
    import httpx

    job = "j-bench00001"
    samples = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        last = (await http.get(f"/v1/studies/{STUDY}/timeline?limit=1")).json()["total"]
        async with http.stream("GET", f"/v1/studies/{STUDY}/events?after={last}") as stream:
            lines = stream.aiter_lines()
            for step in range(1, rounds + 1):
                started = time.perf_counter()
                await bus.publish(_metric(job, step))
                async for line in lines:
                    if line.startswith("data:") and '"worker.metric"' in line:
                        break
                samples.append(time.perf_counter() - started)
    return _ms(samples)


def _browser(bus: Any, url: str, loop: asyncio.AbstractEventLoop,
             rounds: int = 20) -> dict[str, Any]:
    """In a thread of its own (Playwright's sync API), publishing through the loop."""
    from playwright.sync_api import sync_playwright

    job = "j-bench00002"
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{url}/studies/{STUDY}/jobs/{job}")
            page.locator("body[data-live=open]").wait_for(timeout=30_000)
            samples = []
            for step in range(1, rounds + 1):
                started = time.perf_counter()
                asyncio.run_coroutine_threadsafe(bus.publish(_metric(job, step)), loop).result()
                page.locator(f"#rounds[data-rounds='{step}']").wait_for(timeout=30_000)
                samples.append(time.perf_counter() - started)
            out["bus_to_browser"] = {**_ms(samples), "target_ms": 100}
            for name, path in (("dashboard_first_load_500_recipes", "/recipes"),
                               ("dashboard_first_load_empty_page", "/evidence")):
                loads = []
                for _ in range(10):
                    fresh = browser.new_page()
                    started = time.perf_counter()
                    fresh.goto(f"{url}{path}", wait_until="load")
                    loads.append(time.perf_counter() - started)
                    rows = fresh.locator("table tbody tr").count()
                    fresh.close()
                out[name] = {**_ms(loads), "rows_shown": rows}
            # The empty page is the floor: what a navigation costs this browser here at all.
            out["dashboard_first_load_500_recipes"].update(recipes=500, target_ms=300)
        finally:
            browser.close()
    return out


async def _run() -> dict[str, Any]:
    from cairn.bus import Bus
    from cairn.runtime.natsserver import NatsServer

    with tempfile.TemporaryDirectory(prefix="cairn-bench-api-") as tmp:
        nats = NatsServer(Path(tmp) / "nats").start()
        try:
            bus = await Bus.connect(nats.url, name="bench-api")
            try:
                await bus.ensure_federation()
                started = time.perf_counter()
                await _fill(bus)
                fill_s = time.perf_counter() - started
                started = time.perf_counter()
                service, url = await _serve(bus)
                fold_s = time.perf_counter() - started
                try:
                    result: dict[str, Any] = {"fill_s": round(fill_s, 2),
                                              "start_and_fold_s": round(fold_s, 2)}
                    result.update(await _latency(url))
                    result["bus_to_sse"] = _ms_target(await _sse(bus, url))
                    if shutil.which("chromium") or Path("/usr/bin/chromium").exists():
                        try:
                            import playwright  # noqa: F401
                        except ImportError:
                            result["browser"] = {"skipped": "playwright is not installed"}
                        else:
                            loop = asyncio.get_running_loop()
                            result.update(await asyncio.to_thread(_browser, bus, url, loop))
                    else:
                        result["browser"] = {"skipped": "no chromium (apt-get install "
                                                        "chromium)"}
                    return result
                finally:
                    await service.stop()
            finally:
                await bus.close()
        finally:
            nats.stop()


def _ms_target(figures: dict[str, Any]) -> dict[str, Any]:
    return {**figures, "target_ms": 100}


def run() -> Any:
    return _run()


if __name__ == "__main__":
    import json

    print(json.dumps(asyncio.run(_run()), indent=2))
