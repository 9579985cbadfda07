"""Publish throughput of a 3-server cluster with three copies of the stream (R3) as a ratio of
one server (R1): what `cairn up --cluster 3` costs every event Cairn writes.

Both sides run the same nats-server binary on loopback; the cluster's routes are TLS with a
throwaway CA, as `cairn up --cluster` runs them (`cairn.runtime._cluster.cluster_block`).
Clients speak plain NATS on both sides, so the ratio is the cost of replication alone. Each
round publishes `N_PUBLISH` Cairn events through `Bus.publish_async` (all acks awaited) to a
fresh stream of the study layout, and the same bytes through nats-py's own `publish_async`
(`raw_*`: what the servers allow when the publisher is not the bottleneck); variants are
interleaved, the median is kept.

`run()` returns the `scale_cluster` section for `tools/bench.py`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from bench_bus import make_events, publish_raw

from cairn import subjects
from cairn.bus import Bus
from cairn.runtime._cluster import cluster_block
from cairn.runtime.natsserver import NatsServer, free_port

N_PUBLISH = 10_000
ROUNDS = 5
PHASE_TIMEOUT_S = 120.0


def progress(message: str) -> None:
    print(f"[bench scale_cluster] {message}", file=sys.stderr, flush=True)


def _route_pki(root: Path) -> tuple[Path, Path, Path]:
    from cairn.trust import pki

    root.mkdir(parents=True, exist_ok=True)
    ca_pem, ca_key = pki.new_ca("bench")
    cert, key = pki.new_server_cert(ca_pem, ca_key, ["localhost", "127.0.0.1"],
                                    federation="bench", client_auth=True)
    paths = root / "ca.pem", root / "route.pem", root / "route.key"
    for path, data in zip(paths, (ca_pem, cert, key), strict=True):
        path.write_bytes(data)
    return paths


def _cluster(root: Path, size: int) -> list[NatsServer]:
    ca, cert, key = _route_pki(root)
    members = [NatsServer(root / f"n{i}") for i in range(size)]
    routes = [free_port() for _ in members]
    for i, member in enumerate(members):
        config = root / f"n{i}.conf"
        config.write_text(
            f'server_name: "bench-{i}"\nlisten: "127.0.0.1:{member.port}"\n'
            f'http: "127.0.0.1:{member.monitor_port}"\n'
            f'jetstream {{ store_dir: "{member.store_dir.resolve()}" }}\n'
            + cluster_block(host="127.0.0.1", route_port=routes[i],
                            peers=[p for j, p in enumerate(routes) if j != i],
                            cert=cert, key=key, ca=ca))
        member.config_file = config
    return members


async def _rate(url: str, replicas: int, study: str, *, raw: bool = False) -> float:
    """Events/s into a fresh study stream of `replicas` copies: through `Bus` or, `raw`,
    nats-py's own `publish_async` with the same bytes (what the servers alone allow)."""
    bus = await Bus.connect(url, name="bench-scale-cluster", retry_for=30)
    try:
        bus.replicas = replicas
        await bus.ensure(subjects.study_stream(study))
        events = make_events(study, N_PUBLISH)
        if raw:
            nc = await nats.connect(url.split(","), pending_size=64 * 1024 * 1024)
            try:
                return await publish_raw(nc.jetstream(timeout=5.0), events)
            finally:
                await nc.close()
        start = time.perf_counter()
        for event in events:
            await bus.publish_async(event)
        await bus.flush_publishes(PHASE_TIMEOUT_S)
        return N_PUBLISH / (time.perf_counter() - start)
    finally:
        await bus.close()


def _plain_url(server: NatsServer) -> str:
    return f"nats://{server.host}:{server.port}"


async def _measure(single: NatsServer, cluster: list[NatsServer]) -> dict[str, Any]:
    cluster_url = ",".join(_plain_url(m) for m in cluster)
    await _rate(_plain_url(single), 1, "warm-single")
    await _rate(cluster_url, 3, "warm-cluster")
    rates: dict[str, list[float]] = {"one": [], "three": [], "raw_one": [], "raw_three": []}
    targets = {"one": (_plain_url(single), 1), "three": (cluster_url, 3),
               "raw_one": (_plain_url(single), 1), "raw_three": (cluster_url, 3)}
    names = list(rates)
    for round_ in range(ROUNDS):
        # Interleaved, each round starting elsewhere: a machine that gets busier (or
        # quieter) over the run weighs on every variant alike.
        for name in names[round_ % 4:] + names[:round_ % 4]:
            url, replicas = targets[name]
            rates[name].append(await _rate(url, replicas, f"{name.replace('_', '-')}-{round_}",
                                           raw=name.startswith("raw")))
        progress(f"round {round_ + 1}/{ROUNDS}: " + ", ".join(
            f"{name} {r[-1]:,.0f} msg/s" for name, r in rates.items()))
    median = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "messages": N_PUBLISH,
        "rounds": ROUNDS,
        "one_server_r1_msgs_per_s": round(median["one"]),
        "cluster3_r3_msgs_per_s": round(median["three"]),
        "ratio": round(median["three"] / median["one"], 3),
        "raw_one_server_r1_msgs_per_s": round(median["raw_one"]),
        "raw_cluster3_r3_msgs_per_s": round(median["raw_three"]),
        "raw_ratio": round(median["raw_three"] / median["raw_one"], 3),
        "runs_msgs_per_s": {name: [round(x) for x in r] for name, r in rates.items()},
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-cluster-") as tmp:
        root = Path(tmp)
        single = NatsServer(root / "single")
        cluster = _cluster(root / "cluster", 3)
        try:
            single.start()
            for member in cluster:
                member.start(wait=False)
            for member in cluster:
                member.wait_ready(60)
            return asyncio.run(_measure(single, cluster))
        finally:
            single.stop()
            for member in cluster:
                member.stop()


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
