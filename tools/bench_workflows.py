"""The workflow library: what each workflow costs per round over FedAvg, and how fast a
PyTorch state_dict crosses the data plane.

- per_round: examples/fedavg (2 client sites, 3 rounds) run on a real embedded federation
  once per workflow, as `workflow: {name: ...}` in its job.yaml; the per-round overhead is
  the server's round wall time minus the slowest client's compute (median over rounds), and
  `over_fedavg_s` is that minus FedAvg's in the same run. `aggregate_ms` is the server's
  aggregation alone, in process, for 3 sites' updates of a 1M-parameter model.
- state_dict: a 100 MB `state_dict` (float32 tensors) sent by one data-plane endpoint and
  received by another (`cairn.worker.torch.arrays` -> send -> receive ->
  `cairn.worker.torch.tensors`), against a raw object-store put + get of the same 100 MB on
  the same nats-server; `ratio` is the data plane's throughput over the raw one's.

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

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "fedavg"
WORKFLOWS = {"fedavg": {}, "fedprox": {"mu": 0.01}, "fedadam": {}, "fedyogi": {},
             "fedadagrad": {}, "fedavgm": {}, "scaffold": {}, "cyclic": {}, "median": {},
             "trimmed-mean": {}}
MODEL_MB = 100


def _say(message: str) -> None:
    print(f"[bench workflows] {message}", file=sys.stderr, flush=True)


def _job(dest: Path, name: str, params: dict[str, Any]) -> Path:
    shutil.copytree(EXAMPLE / "app", dest / "app", dirs_exist_ok=True)
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["workflow"] = {"name": name, "params": params, "rounds": 3}
    (dest / "job.yaml").write_text(yaml.safe_dump(spec))
    return dest / "job.yaml"


async def _per_round(base: Path) -> dict[str, Any]:
    from cairn.client import Client
    from cairn.runtime.context import Context
    from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation

    fed = EmbeddedFederation(dir=base / "fed", heartbeat_s=0.5)
    fed.start()
    out: dict[str, Any] = {}
    try:
        await fed.wait_healthy(60)
        sys.path.insert(0, str(EXAMPLE))
        import setup_data

        setup_data.write(fed.dir / "sites", hub=fed.hub)
        assert fed.nats is not None
        client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                              actor=DEFAULT_ADMIN, **fed.client_options()))
        try:
            # One warm-up job: the first launch waits for the launchers' warm interpreters.
            await client.wait(await client.submit(_job(base / "warm", "fedavg", {})), 300)
            for name, params in WORKFLOWS.items():
                final = await client.wait(await client.submit(
                    _job(base / name, name, params)), timeout=300, poll=0.05)
                if final.state != "completed":
                    raise RuntimeError(f"{name} job ended {final.state}: {final.message}")
                [value] = [r.value for r in final.results if r.role == "server"]
                overhead = statistics.median(r["overhead_s"] for r in value["rounds"])
                out[name] = {"round_overhead_s_median": round(overhead, 4),
                             "final_accuracy": round(value["accuracy"][-1], 4)}
                _say(f"{name}: {overhead * 1000:.1f} ms per round over compute")
        finally:
            await client.close()
    finally:
        fed.stop()
    base_s = out["fedavg"]["round_overhead_s_median"]
    for row in out.values():
        row["over_fedavg_s"] = round(row["round_overhead_s_median"] - base_s, 4)
    return out


def _aggregate_ms() -> dict[str, float]:
    from cairn.worker.workflows import Update, make_workflow

    rng = np.random.default_rng(0)
    model = {"w": rng.normal(size=(1000, 1000)), "b": rng.normal(size=1000)}
    updates = [Update(site=f"s{i}", n=100.0 + i, weights={k: v + rng.normal(size=v.shape)
                                                           for k, v in model.items()},
                      extras={"control_delta": {k: np.zeros_like(v)
                                                for k, v in model.items()}})
               for i in range(3)]
    out = {}
    for name, params in WORKFLOWS.items():
        workflow = make_workflow(name, params)
        workflow.known_clients(3)
        workflow.task(1, model)
        t0 = time.perf_counter()
        for rnd in (1, 2, 3):
            workflow.aggregate(rnd, model, updates[-1:] if workflow.cyclic else updates)
        out[name] = round((time.perf_counter() - t0) / 3 * 1000, 2)
    return out


async def _state_dict(base: Path) -> dict[str, Any]:
    import torch

    from cairn.bus import Bus, job_files
    from cairn.runtime.natsserver import NatsServer
    from cairn.worker import torch as ct
    from cairn.worker.dataplane import DataPlane

    tensors = {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(MODEL_MB // 4)}
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    server = NatsServer(base / "nats").start()
    try:
        sender = await Bus.connect(server.url, name="bench-sender")
        receiver = await Bus.connect(server.url, name="bench-receiver")
        await sender.ensure_study("bench")
        try:
            a = DataPlane(sender, study="bench", job="j-bench", site="hub", role="server",
                          rank=0)
            b = DataPlane(receiver, study="bench", job="j-bench", site="site-a",
                          role="client", rank=0)
            await a.start()
            await b.start()
            exchange = []
            for _ in range(3):
                t0 = time.perf_counter()
                await a.send("client", 0, "model", ct.arrays(tensors))
                got = ct.tensors((await b.receive("model", 120)).payload)
                exchange.append(time.perf_counter() - t0)
            assert torch.equal(got["layer0.weight"], tensors["layer0.weight"])
            await a.close()
            await b.close()
            raw = []
            blob = np.random.default_rng(0).bytes(size)
            store = job_files(sender, "bench", "j-bench")
            other = job_files(receiver, "bench", "j-bench")
            for i in range(3):
                payload = blob[:-1] + bytes([i])  # a new object each time (content-addressed)
                t0 = time.perf_counter()
                digest = await store.put(payload)
                await other.get(digest, digest=digest)
                raw.append(time.perf_counter() - t0)
        finally:
            await sender.close()
            await receiver.close()
    finally:
        server.stop()
    best, best_raw = min(exchange), min(raw)
    return {"model_mb": round(size / 2**20, 1), "exchange_s": [round(t, 3) for t in exchange],
            "raw_put_get_s": [round(t, 3) for t in raw],
            "exchange_mb_s": round(size / 2**20 / best, 1),
            "raw_mb_s": round(size / 2**20 / best_raw, 1),
            "ratio": round(best_raw / best, 3)}


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-workflows-") as tmp:
        base = Path(tmp)
        result: dict[str, Any] = {"aggregate_ms_1m_params_3_sites": _aggregate_ms()}
        _say(f"aggregation: {result['aggregate_ms_1m_params_3_sites']}")
        try:
            import torch  # noqa: F401
        except ImportError:
            result["state_dict"] = {"skipped": "torch is not installed (make setup)"}
        else:
            result["state_dict"] = asyncio.run(_state_dict(base))
            _say(f"state_dict: {result['state_dict']}")
        result["per_round"] = asyncio.run(_per_round(base))
        return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
