"""FedAvg on Cairn next to NVIDIA FLARE 2.9's POC mode, measured on one machine in one run.

- start: what `cairn up` does (EmbeddedFederation forking its parents: nats-server, the hub's
  parent with the coordinator, 2 site parents) until every service answers its health ping.
- job: submit -> completed of examples/fedavg, 3 rounds, 2 client sites (default compute):
  the first job right after the start (its launch may wait for the launchers' warm
  interpreters), then three more.
- per-round overhead: the server's round wall time minus the slowest client's compute time
  (clients report their compute time with each update); the median over rounds. Measured
  twice: with the example's tiny compute, and with 1 s of simulated compute per round.
- first line: submit -> the first line of a trivial worker's code running (it writes
  `time.time()` to a file in its working directory as its first statement), median of 3.

`run()` returns the section for `tools/bench.py`; progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from cairn.client import Client
from cairn.runtime.context import Context
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "fedavg"
FLARE_POC = {"start_s": 8.9, "job_3_rounds_s": 13.7, "round_overhead_s": 2.0,
             "round_overhead_tuned_s": 0.40, "first_line_s": 0.93}

FIRST_LINE = """\
import os, time; T0 = time.time()
open(os.path.join(os.environ["CAIRN_WORKDIR"], "first_line"), "w").write(repr(T0))
"""


def _say(message: str) -> None:
    print(f"[bench fedavg] {message}", file=sys.stderr, flush=True)


def _fedavg_job(dest: Path, **params: Any) -> Path:
    shutil.copytree(EXAMPLE / "app", dest / "app", dirs_exist_ok=True)
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["params"].update(params)
    (dest / "job.yaml").write_text(yaml.safe_dump(spec))
    return dest / "job.yaml"


def _first_line_job(dest: Path) -> Path:
    return one_script_job(dest, "first-line", FIRST_LINE)


def one_script_job(dest: Path, name: str, script: str) -> Path:
    """A job folder of one client role at site-a running `script` (the benches' probes)."""
    (dest / "app").mkdir(parents=True, exist_ok=True)
    (dest / "app" / "main.py").write_text(script)
    spec = {"name": name, "code": "./app",
            "roles": {"client": {"entrypoint": "python main.py", "sites": ["site-a"],
                                 "resources": {"cpus": 1, "memory": "256Mi"}}}}
    (dest / "job.yaml").write_text(yaml.safe_dump(spec))
    return dest / "job.yaml"


async def _fedavg(client: Client, spec: Path) -> dict[str, Any]:
    t0 = time.time()
    job_id = await client.submit(spec)
    final = await client.wait(job_id, timeout=300, poll=0.05)
    took = time.time() - t0
    if final.state != "completed":
        raise RuntimeError(f"fedavg job {job_id} ended {final.state}: {final.message}")
    [value] = [r.value for r in final.results if r.role == "server"]
    rounds = value["rounds"]
    return {"submit_to_completed_s": round(took, 3),
            "round_wall_s": [round(r["wall_s"], 3) for r in rounds],
            "round_max_compute_s": [round(r["max_compute_s"], 3) for r in rounds],
            "round_overhead_s_median": round(statistics.median(
                r["overhead_s"] for r in rounds), 4),
            "accuracy": [round(a, 4) for a in value["accuracy"]]}


async def _first_line(fed: EmbeddedFederation, client: Client, spec: Path) -> float:
    t0 = time.time()
    job_id = await client.submit(spec)
    final = await client.wait(job_id, timeout=60, poll=0.05)
    if final.state != "completed":
        raise RuntimeError(f"first-line job {job_id} ended {final.state}: {final.message}")
    marks = list((fed.site_dir("site-a") / "work" / "workers").glob(f"{job_id}*/first_line"))
    return float(marks[0].read_text()) - t0


async def _measure(base: Path, fed: EmbeddedFederation, t0: float) -> dict[str, Any]:
    try:
        await fed.wait_healthy(60)
        start_s = time.monotonic() - t0
        _say(f"federation healthy in {start_s:.2f}s")
        sys.path.insert(0, str(EXAMPLE))
        import setup_data

        setup_data.write(fed.dir / "sites", hub=fed.hub)
        assert fed.nats is not None
        client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                              actor=DEFAULT_ADMIN, **fed.client_options()))
        try:
            plain = await _fedavg(client, _fedavg_job(base / "job1", rounds=3))
            _say(f"3-round job in {plain['submit_to_completed_s']}s")
            # Again, as a site runs jobs once its launcher's warm interpreter is up.
            again = [(await _fedavg(client, _fedavg_job(base / f"job1-{i}", rounds=3)))[
                "submit_to_completed_s"] for i in range(3)]
            plain["again_submit_to_completed_s"] = again
            _say(f"3-round job again: {again}")
            loaded = await _fedavg(client, _fedavg_job(base / "job2", rounds=3, delay=1.0))
            _say(f"3-round job with 1 s compute per round in {loaded['submit_to_completed_s']}s")
            spec = _first_line_job(base / "job3")
            firsts = [await _first_line(fed, client, spec) for _ in range(3)]
            _say(f"first line after {statistics.median(firsts):.3f}s")
        finally:
            await client.close()
    finally:
        fed.stop()
    return {
        "cairn": {"start_s": round(start_s, 3), "job_3_rounds": plain,
                  "job_3_rounds_1s_compute": loaded,
                  "first_line_s": [round(f, 3) for f in firsts],
                  "first_line_s_median": round(statistics.median(firsts), 3)},
        "nvflare_2_9_poc": FLARE_POC,
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-fedavg-") as tmp:
        # Started as `cairn up` starts it (parents forked from one pre-imported process,
        # which must happen before an event loop runs here).
        fed = EmbeddedFederation(dir=Path(tmp) / "fed", heartbeat_s=0.5)
        t0 = time.monotonic()
        fed.start(fork=True)
        return asyncio.run(_measure(Path(tmp), fed, t0))


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
