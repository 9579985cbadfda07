"""Benchmark signed evidence: DSSE signatures and verifications per second, verifying one
bundle (constraint re-evaluation included), and drift -> demotion as the coordinator sees it.

Run: `.venv/bin/python tools/bench_evidence.py`. Targets: one bundle verified in under 50 ms;
a drift that breaks a constraint visible to the coordinator's evidence view in under 1 s.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `tests.fixtures` importable

from cairn.events import RecipeRequirement  # noqa: E402
from cairn.evidence import dsse  # noqa: E402
from cairn.evidence.keys import SigningKey  # noqa: E402
from cairn.evidence.verify import verify_bundle  # noqa: E402
from tests.fixtures import evidence as ev  # noqa: E402

KERNEL = "OS.sysctl./proc/sys/kernel/osrelease"


def _rate(fn: Any, seconds: float = 1.0) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        count += 1
    return round(count / (time.perf_counter() - start), 1)


def _median_ms(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 3)


def signing() -> dict[str, float]:
    key = SigningKey.generate()
    files = ev.bundle("site-a", [key])
    payload = dsse.decode_envelope(files["attestation.dsse.json"]).payload_bytes()
    envelope = dsse.sign(payload, dsse.IN_TOTO_PAYLOAD_TYPE, [key])
    keys = {key.key_id: key.verifying_key}
    return {
        "statement_bytes": len(payload),
        "signatures_per_s": _rate(lambda: dsse.sign(payload, dsse.IN_TOTO_PAYLOAD_TYPE, [key])),
        "verifications_per_s": _rate(lambda: dsse.check_signatures(envelope, keys)),
    }


def bundle_verification() -> dict[str, float]:
    key = SigningKey.generate()
    trust = ev.trust_of(("site-a", "site", key))
    now = datetime.now(UTC)
    out: dict[str, float] = {}
    for nodes in (1, 64):
        files = ev.bundle("site-a", [key], snap=ev.snapshot("site-a", nodes=nodes))
        assert verify_bundle(files, trust, now=now).passed
        out[f"verify_bundle_{nodes}_nodes_ms"] = _median_ms(
            lambda f=files: verify_bundle(f, trust, now=now), 30)
        out[f"bundle_{nodes}_nodes_bytes"] = sum(map(len, files.values()))
    out["verify_target_ms"] = 50.0
    return out


async def drift_to_demotion(rounds: int = 5) -> dict[str, Any]:
    """A real nats-server, the coordinator's EvidenceBoard following it: time from storing
    a drifted snapshot to the board's view judging the site demoted."""
    from cairn.bus import Bus
    from cairn.coordinator.eligibility import EvidenceBoard
    from cairn.evidence.store import publish_bundle
    from cairn.runtime.natsserver import NatsServer
    from cairn.runtime.service import Runtime, ServiceConfig
    from cairn.snapshot import make_snapshot, remote

    key = SigningKey.generate()
    with tempfile.TemporaryDirectory() as tmp:
        trust = Path(tmp) / "trust.yaml"
        trust.write_text(json.dumps({"signers": [{"name": "site-a", "role": "site",
                                                  "key": key.verifying_key.public_raw_b64()}]}))
        server = NatsServer(Path(tmp) / "nats").start()
        bus = await Bus.connect(server.url)
        runtime = Runtime(bus, ServiceConfig(nats_url=server.url), "hub")
        try:
            await bus.ensure_federation()
            judged = ev.snapshot("site-a")
            await bus.publish(await remote.record(bus, judged, source="snapshotter@site-a",
                                                  reason="start"))
            await publish_bundle(bus, ev.bundle("site-a", [key], snap=judged), source="bench")
            board = EvidenceBoard({"evidence_trust": str(trust)}, verifier="bench")
            await board.start(runtime)
            requires = RecipeRequirement(recipe=ev.CPU_RECIPE)
            assert board.view().judge("site-a", requires, datetime.now(UTC)).eligible
            times = []
            for index in range(rounds):
                kernel = "4.19.0" if index % 2 == 0 else "6.1.0"
                want = "drifted" if index % 2 == 0 else "eligible"
                snap = make_snapshot(site="site-a", taken_at=datetime.now(UTC), nodes={
                    "node-0": {**judged.readings("node-0"), KERNEL: kernel}})
                event = await remote.record(bus, snap, source="snapshotter@site-a",
                                            reason="schedule")
                start = time.perf_counter()
                await bus.publish(event)
                deadline = start + 10
                while board.view().judge("site-a", requires, datetime.now(UTC)).reason != want:
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"no {want} within 10 s")
                    await asyncio.sleep(0.002)
                times.append(time.perf_counter() - start)
        finally:
            await runtime.close()
            await bus.close()
            server.stop()
    return {"drift_to_demotion_ms_median": round(statistics.median(times[0::2]) * 1000, 1),
            "drift_to_demotion_ms_max": round(max(times[0::2]) * 1000, 1),
            "restore_ms_median": round(statistics.median(times[1::2]) * 1000, 1),
            "demotion_target_ms": 1000.0}


async def run() -> dict[str, Any]:
    return {**signing(), **bundle_verification(), **await drift_to_demotion()}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run()), indent=2))
