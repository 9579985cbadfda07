"""Nonce benchmarks: what the durable single-use check of a signed request costs.

The coordinator records each accepted request's nonce in KV `nonces` with KV `create` (one
JetStream round trip; a replay costs a second, the read that tells a used key from a
deleted one). Measured as the coordinator does it: the hub's identity over TLS and the
authority, on a real nats-server, one request after another; and the whole check (signature,
credential, nonce) per request. Run through `make bench` (tools/bench.py --only nonces).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cairn import api, subjects
from cairn.bus import Bus
from cairn.trust.requests import BucketNonces, RequestSigner, RequestVerifier

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `tools.*` importable

from tools._secure_bench import secure_server, server_tls  # noqa: E402

TARGET_MS = 1.0


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered) * 1000, 3),
            "p99": round(ordered[int(len(ordered) * 0.99) - 1] * 1000, 3),
            "mean": round(statistics.fmean(ordered) * 1000, 3)}


async def _measure(bus: Bus, trust_dir: Path, n: int) -> dict[str, Any]:
    nonces = BucketNonces(bus, subjects.KV_NONCES)
    await nonces.first_use("warm-up-nonce-0000", signer="bench")  # opens (makes) the bucket
    first, again = [], []
    for i in range(n):
        nonce = f"bench-{i:06d}-{time.time_ns()}"
        t0 = time.perf_counter()
        assert await nonces.first_use(nonce, signer="admin@coord")
        first.append(time.perf_counter() - t0)
        if i % 10 == 0:
            t0 = time.perf_counter()
            assert not await nonces.first_use(nonce, signer="admin@coord")
            again.append(time.perf_counter() - t0)
    signer = RequestSigner.from_creds(trust_dir / "kits" / "admin@coord" / "admin.creds")
    verifier = RequestVerifier.from_kit(trust_dir / "kits" / "hub" / "hub.creds", nonces)
    signed = [signer.sign(api.Envelope(request=api.JobList(), actor="admin@coord",
                                       study="demo")) for _ in range(n)]
    whole = []
    for raw in signed:
        envelope = api.decode_envelope(raw, verb="jobs", study="demo")
        t0 = time.perf_counter()
        await verifier.verify(raw, envelope, study="demo")
        whole.append(time.perf_counter() - t0)
    return {"first_use_ms": _ms(first), "replay_refused_ms": _ms(again),
            "verify_with_nonce_ms": _ms(whole)}


async def nonce_costs(n: int = 2000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with secure_server(root, "nats") as (server, trust):
            bus = await Bus.connect(server.url, name="bench-nonces",
                                    creds=str(trust.creds("hub")), tls=server_tls(trust))
            try:
                return await _measure(bus, root / "trust", n)
            finally:
                await bus.close()


def run() -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(nonce_costs())
    result["targets"] = {"first_use_ms_p50": TARGET_MS}
    result["note"] = ("KV create per accepted request, as the hub over TLS with the authority "
                      "on; sequential, as the coordinator answers requests")
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=1))
