"""Deployment numbers: image builds, compose up -> healthy, and what tracing costs.

- images: the parent (cairn/cairn) and NATS images built cold (an empty cache, twice: the two
  image ids must be equal) and cached (the same inputs again), with their layer sizes.
- compose: `docker-compose up -d` of docker-compose.yml + docker-compose.test.yml on a private
  engine (tests/fixtures/docker.py; needs root, docker.io and docker-compose) until every
  service's health check says healthy, then `down -v`.
- tracing: the FedAvg job (examples/fedavg, 3 rounds, 2 client sites, as tools/bench_fedavg.py
  runs it) on three embedded federations started side by side: tracing off ("plain"), set up
  but sampling nothing ("unsampled", OTEL_TRACES_SAMPLER=parentbased_traceidratio at 0), and
  tracing every job ("traced": the default samplers, the submit as the sampled root span as
  `cairn job submit` makes it, every hop following it) to an in-process OTLP receiver. The
  jobs alternate between them so all see the same machine load. A job's time runs from just
  before the submit to the time its `job.completed` event carries (the client's polling
  would round it up to its interval).
  Overhead: each median submit -> completed over the plain one, in percent (target for
  "traced": under 10 %), for the example as it is (about 0.4 s: fixed costs dominate) and
  with 1 s of simulated compute per round (as tools/bench_fedavg.py's second job).

`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "fedavg"
TRACED_JOBS = 15
TRACING_TARGET_PCT = 10.0


def _say(message: str) -> None:
    print(f"[bench deploy] {message}", file=sys.stderr, flush=True)


def _images(tmp: Path) -> dict[str, Any]:
    from tests.fixtures.docker import image_builder

    out: dict[str, Any] = {}
    for name in ("cairn", "nats"):
        builder = image_builder(name)
        cache = tmp / f"cache-{name}"
        timings, ids = [], []
        for attempt in ("cold", "cold again"):
            shutil.rmtree(cache, ignore_errors=True)
            t0 = time.perf_counter()
            built = builder.build(tmp / f"{name}.tar", cache=cache)
            timings.append(time.perf_counter() - t0)
            ids.append(built.archive.image_id)
            _say(f"{name} image {attempt}: {timings[-1]:.2f}s")
        t0 = time.perf_counter()
        cached = builder.build(tmp / f"{name}.tar", cache=cache)
        cached_s = time.perf_counter() - t0
        out[name] = {"tag": cached.tag, "cold_s": round(min(timings), 2),
                     "cached_s": round(cached_s, 3), "from_cache": cached.cached,
                     "layer_mb": round(cached.archive.size / 2**20, 1),
                     "reproducible": len(set(ids)) == 1 and ids[0] == cached.archive.image_id}
    return out


def _compose(tmp: Path) -> dict[str, Any]:
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("docker-compose"):
        return {"skipped": "needs root, dockerd (docker.io) and docker-compose"}
    from tests.fixtures.compose import SERVICES, prepare, wait_healthy
    from tests.fixtures.docker import build_image, start_engine, stop

    root = Path(tempfile.mkdtemp(prefix="cairn-bdk-"))  # short: a unix socket path
    engine = start_engine(root)
    try:
        images = tmp / "compose-images"
        cairn = build_image(engine, "cairn", images)
        nats = build_image(engine, "nats", images)
        project = prepare(engine, tmp / "compose", cairn.tag, nats.tag,
                          name=f"cairn-bench-{os.getpid()}")
        t0 = time.perf_counter()
        try:
            project.run("up", "-d", timeout=300)
            wait_healthy(project)
            healthy_s = time.perf_counter() - t0
            _say(f"compose up -> {len(SERVICES)} services healthy in {healthy_s:.2f}s")
        finally:
            t1 = time.perf_counter()
            project.run("down", "-v", "--timeout", "10", timeout=180, check=False)
            down_s = time.perf_counter() - t1
        return {"services": len(SERVICES), "up_to_healthy_s": round(healthy_s, 2),
                "down_s": round(down_s, 2)}
    finally:
        stop(engine)
        shutil.rmtree(root, ignore_errors=True)


def _job_spec(dest: Path, **params: Any) -> Path:
    import yaml

    shutil.copytree(EXAMPLE / "app", dest / "app", dirs_exist_ok=True)
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["params"].update(rounds=3, **params)
    (dest / "job.yaml").write_text(yaml.safe_dump(spec))
    return dest / "job.yaml"


async def _one_job(client: Any, spec: Path, traced: bool, endpoint: str) -> float:
    from cairn import telemetry

    if traced:
        # As `cairn job submit` does with OTEL_EXPORTER_OTLP_ENDPOINT set: the submit is
        # the root span of the job's trace.
        telemetry.setup("cairn-cli", endpoint=endpoint)
    try:
        t0 = time.time()
        with telemetry.span("cairn job submit", **{"cairn.study": "demo"}):
            job_id = await client.submit(spec)
        final = await client.wait(job_id, timeout=300, poll=0.05)
    finally:
        if traced:
            telemetry.shutdown()
    if final.state != "completed":
        raise RuntimeError(f"fedavg job {job_id} ended {final.state}: {final.message}")
    async for entry in client.events(job=job_id):
        if entry.type == "job.completed" and entry.at is not None:
            return entry.at.timestamp() - t0
    raise RuntimeError(f"fedavg job {job_id}: no job.completed event in its history")


async def _alternate(feds: dict[str, Any], tmp: Path, endpoint: str
                     ) -> dict[str, dict[str, list[float]]]:
    """Jobs on each federation in turn (the order reversed every other round)."""
    from cairn.client import Client
    from cairn.runtime.context import Context
    from cairn.runtime.embedded import DEFAULT_ADMIN

    sys.path.insert(0, str(EXAMPLE))
    import setup_data

    clients = {}
    for mode, fed in feds.items():
        await fed.wait_healthy(120)
        setup_data.write(fed.dir / "sites", hub=fed.hub)
        clients[mode] = await Client.connect(Context(
            nats_url=fed.nats.url, study="demo", actor=DEFAULT_ADMIN, **fed.client_options()))
    times: dict[str, dict[str, list[float]]] = {}
    try:
        for mode in feds:  # a first job each: launchers' warm interpreters come up
            await _one_job(clients[mode], _job_spec(tmp / "warmup"), mode == "traced",
                           endpoint)
        for variant, params, jobs in (("tiny_compute", {}, TRACED_JOBS),
                                      ("compute_1s_per_round", {"delay": 1.0}, 3)):
            spec = _job_spec(tmp / variant, **params)
            times[variant] = {mode: [] for mode in feds}
            for index in range(jobs):
                order = list(feds) if index % 2 == 0 else list(reversed(feds))
                for mode in order:
                    times[variant][mode].append(
                        await _one_job(clients[mode], spec, mode == "traced", endpoint))
                _say(f"{variant} job {index + 1}/{jobs}: " + ", ".join(
                    f"{mode} {values[-1]:.3f}s" for mode, values in times[variant].items()))
    finally:
        for client in clients.values():
            await client.close()
    return times


def _tracing(tmp: Path) -> dict[str, Any]:
    from cairn.runtime.embedded import EmbeddedFederation
    from tools.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        feds = {"plain": EmbeddedFederation(dir=tmp / "plain", heartbeat_s=0.5),
                # Tracing set up, nothing sampled: what a deployment with a low ratio pays
                # on its unsampled jobs (the parents trace, the workers see an unsampled
                # TRACEPARENT and do not).
                "unsampled": EmbeddedFederation(
                    dir=tmp / "unsampled", heartbeat_s=0.5,
                    extra_env={**env, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                               "OTEL_TRACES_SAMPLER_ARG": "0"}),
                # Every job traced, with the default samplers: the submit (the root) is
                # sampled and every service and worker follows it (the client's polls are
                # traces of their own too).
                "traced": EmbeddedFederation(dir=tmp / "traced", heartbeat_s=0.5,
                                             extra_env=env)}
        try:
            for fed in feds.values():
                fed.start()
            times = asyncio.run(_alternate(feds, tmp, receiver.endpoint))
        finally:
            for fed in feds.values():
                fed.stop()
        spans = receiver.spans()
    result: dict[str, Any] = {
        "sampler": "defaults, every job's root sampled (traced); parentbased_traceidratio 0 "
                   "(unsampled)",
        "measured": "submit to the job.completed event's time"}
    for variant, by_mode in times.items():
        medians = {mode: statistics.median(values) for mode, values in by_mode.items()}
        overhead = {mode: round((medians[mode] - medians["plain"]) / medians["plain"] * 100,
                                1) for mode in ("unsampled", "traced")}
        result[variant] = {
            "submit_to_completed_s": {m: [round(v, 3) for v in vs] for m, vs in by_mode.items()},
            "median_s": {m: round(v, 3) for m, v in medians.items()},
            "overhead_pct": overhead, "target_pct": TRACING_TARGET_PCT,
            "within_target": overhead["traced"] < TRACING_TARGET_PCT}
    result.update(spans_received=len(spans), traces=len({s.trace_id for s in spans}))
    return result

def run() -> dict[str, Any]:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # tests.fixtures, tools.otlp_receiver
    with tempfile.TemporaryDirectory(prefix="cairn-bench-deploy-") as tmp:
        base = Path(tmp)
        result: dict[str, Any] = {"images": _images(base)}
        try:
            result["compose"] = _compose(base)
        except Exception as exc:  # noqa: BLE001 - the tracing numbers are still worth having
            result["compose"] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        result["tracing"] = _tracing(base)
        return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
