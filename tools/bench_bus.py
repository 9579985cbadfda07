"""What `cairn.bus` costs over raw nats-py, measured on one private nats-server in one run.

- publish: raw `js.publish_async` vs `Bus.publish_async` (tracing off, then on with spans
  dropped by the exporter), same payload bytes and headers, all acks awaited; each variant on
  its own stream of the same configuration; rounds interleaved, the median kept.
- hop: `Bus.publish` of one event to a `Subscription` handler, one at a time (p50 / p99).
- replay: `cairn.bus.replay` over a stream vs a raw durable pull `fetch(500)` + ack.

`run()` returns the section for `tools/bench.py`; progress goes to stderr. Every phase is
bounded in time, so the whole section ends within a couple of minutes on two cores.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from cairn import events as ev
from cairn import subjects, telemetry
from cairn.bus import MSG_ID, Bus, Delivery, Subscription, replay
from cairn.runtime.natsserver import NatsServer

N_PUBLISH = 20_000
ROUNDS = 3
HOP_SAMPLES = 500
HOP_BUDGET_S = 20.0
N_REPLAY = 20_000
PHASE_TIMEOUT_S = 60.0
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TARGETS = {
    "publish_ratio_untraced": 0.85,
    "publish_ratio_traced": 0.5,
    "hop_p50_ms": 1.0,
    "replay_ratio": 0.8,
}


def progress(message: str) -> None:
    print(f"[bench bus] {message}", file=sys.stderr, flush=True)


class DroppingExporter(SpanExporter):
    """Takes every span and keeps none: what is measured is making and ending them."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def make_events(study: str, n: int) -> list[ev.JobSubmitted]:
    role = [ev.RoleRequest(name="trainer", entrypoint="python train.py")]
    return [
        ev.JobSubmitted(
            **ev.stamp(),
            source="bench@hub",
            study=study,
            job=f"j-{i % 97}",
            name="bench",
            roles=role,
            params={"lr": 0.01, "epochs": 3},
        )
        for i in range(n)
    ]


async def publish_raw(js: Any, events: list[ev.JobSubmitted]) -> float:
    """Raw nats-py: the same bytes and headers Cairn sends, prepared before the clock starts."""
    prepared = [(subjects.subject_of(e), ev.encode(e), e.id) for e in events]
    start = time.perf_counter()
    for subject, payload, msg_id in prepared:
        await js.publish_async(
            subject, payload, headers={MSG_ID: msg_id, telemetry.TRACEPARENT: TRACEPARENT}
        )
    await asyncio.wait_for(js.publish_async_completed(), PHASE_TIMEOUT_S)
    return len(events) / (time.perf_counter() - start)


async def publish_bus(bus: Bus, events: list[ev.JobSubmitted]) -> float:
    start = time.perf_counter()
    for event in events:
        await bus.publish_async(event)
    await bus.flush_publishes(PHASE_TIMEOUT_S)
    return len(events) / (time.perf_counter() - start)


async def publish_bus_traced(bus: Bus, events: list[ev.JobSubmitted]) -> float:
    telemetry.setup("bench", exporter=DroppingExporter())
    try:
        return await publish_bus(bus, events)
    finally:
        telemetry.shutdown()


async def bench_publish(url: str, bus: Bus) -> dict[str, Any]:
    raw_nc = await nats.connect(url, name="bench-raw", pending_size=64 * 1024 * 1024)
    raw_js = raw_nc.jetstream(timeout=5.0)
    variants: dict[str, Callable[[list[ev.JobSubmitted]], Awaitable[float]]] = {
        "raw": lambda events: publish_raw(raw_js, events),
        "bus": lambda events: publish_bus(bus, events),
        "bus_traced": lambda events: publish_bus_traced(bus, events),
    }
    # One stream per variant, same configuration, so neither dedup nor stream size is shared.
    study = {name: f"bench-{name.replace('_', '-')}" for name in variants}
    await bus.ensure(*(subjects.study_stream(s) for s in study.values()))
    rates: dict[str, list[float]] = {name: [] for name in variants}
    try:
        # Warm up: connections, reply subscriptions, first-use imports.
        await variants["raw"](make_events(study["raw"], 500))
        await variants["bus"](make_events(study["bus"], 500))
        names = list(variants)
        for round_ in range(ROUNDS):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                events = make_events(study[name], N_PUBLISH)
                rate = await variants[name](events)
                rates[name].append(rate)
                progress(f"publish round {round_ + 1}/{ROUNDS} {name}: {rate:,.0f} msg/s")
    finally:
        await raw_nc.close()
    median = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "messages": N_PUBLISH,
        "rounds": ROUNDS,
        "raw_msgs_per_s": round(median["raw"]),
        "bus_msgs_per_s": round(median["bus"]),
        "bus_traced_msgs_per_s": round(median["bus_traced"]),
        "ratio_untraced": round(median["bus"] / median["raw"], 3),
        "ratio_traced": round(median["bus_traced"] / median["raw"], 3),
        "runs_msgs_per_s": {name: [round(r) for r in rs] for name, rs in rates.items()},
    }


async def bench_hop(bus: Bus) -> dict[str, Any]:
    """Publish one event, wait until the handler has it, repeat (bounded by HOP_BUDGET_S)."""
    study = "bench-hop"
    await bus.ensure(subjects.study_stream(study))
    received: asyncio.Queue[float] = asyncio.Queue()

    async def handler(event: ev.StudyStreamEvent, delivery: Delivery) -> None:
        received.put_nowait(time.perf_counter())

    sub = Subscription(
        bus,
        stream=subjects.study_stream(study).name,
        durable="bench-hop",
        filters=[subjects.study_all(study)],
        decoder=ev.STUDY_DECODER,
        handler=handler,
    )
    await sub.start()
    latencies: list[float] = []
    deadline = time.monotonic() + HOP_BUDGET_S
    try:
        for event in make_events(study, HOP_SAMPLES + 5):
            if time.monotonic() > deadline:
                break
            sent = time.perf_counter()
            await bus.publish(event)
            got = await asyncio.wait_for(received.get(), 10.0)
            latencies.append((got - sent) * 1000.0)
    finally:
        await sub.stop()
    samples = latencies[5:]  # the first hops bind the consumer and warm up
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] if ordered else 0.0
    progress(f"hop: {len(samples)} samples, p50 {statistics.median(samples):.2f} ms")
    return {
        "samples": len(samples),
        "p50_ms": round(statistics.median(samples), 3),
        "p99_ms": round(p99, 3),
        "mean_ms": round(statistics.fmean(samples), 3),
        "fetch_timeout_s": sub.fetch_timeout,
        "budget_s": HOP_BUDGET_S,
    }


async def replay_bus(bus: Bus, stream: str, decode: bool) -> float:
    start = time.perf_counter()
    count = 0
    async for _ in replay(bus, stream, ev.STUDY_DECODER if decode else None):
        count += 1
    assert count == N_REPLAY, count
    return count / (time.perf_counter() - start)


async def replay_raw(url: str, stream: str, filter_subject: str, durable: str) -> float:
    nc = await nats.connect(url, name="bench-raw-fetch", pending_size=64 * 1024 * 1024)
    try:
        js = nc.jetstream(timeout=5.0)
        psub = await js.pull_subscribe(filter_subject, durable=durable, stream=stream)
        start = time.perf_counter()
        count = 0
        while count < N_REPLAY:
            for msg in await psub.fetch(500, timeout=5.0):
                await msg.ack()
                count += 1
        await nc.flush(timeout=10)
        elapsed = time.perf_counter() - start
        await psub.unsubscribe()
        return count / elapsed
    finally:
        await nc.close()


async def bench_replay(url: str, bus: Bus) -> dict[str, Any]:
    study = "bench-replay"
    spec = subjects.study_stream(study)
    await bus.ensure(spec)
    for event in make_events(study, N_REPLAY):
        await bus.publish_async(event)
    await bus.flush_publishes(PHASE_TIMEOUT_S)
    rates: dict[str, list[float]] = {"bus": [], "bus_undecoded": [], "raw": []}
    for round_ in range(ROUNDS):
        rates["raw"].append(
            await replay_raw(url, spec.name, spec.subjects[0], f"bench-raw-{round_}")
        )
        rates["bus"].append(await replay_bus(bus, spec.name, decode=True))
        rates["bus_undecoded"].append(await replay_bus(bus, spec.name, decode=False))
        progress(
            "replay round {}/{}: raw {:,.0f}/s, bus {:,.0f}/s".format(
                round_ + 1, ROUNDS, rates["raw"][-1], rates["bus"][-1]
            )
        )
    median = {name: statistics.median(r) for name, r in rates.items()}
    return {
        "events": N_REPLAY,
        "rounds": ROUNDS,
        "bus_events_per_s": round(median["bus"]),
        "bus_undecoded_events_per_s": round(median["bus_undecoded"]),
        "raw_fetch_per_s": round(median["raw"]),
        "ratio": round(median["bus"] / median["raw"], 3),
        "ratio_undecoded": round(median["bus_undecoded"] / median["raw"], 3),
    }


def verdicts(
    publish: dict[str, Any], hop: dict[str, Any], replayed: dict[str, Any]
) -> dict[str, Any]:
    values = {
        "publish_ratio_untraced": publish["ratio_untraced"],
        "publish_ratio_traced": publish["ratio_traced"],
        "hop_p50_ms": hop["p50_ms"],
        "replay_ratio": replayed["ratio"],
    }
    out = {}
    for name, value in values.items():
        target = TARGETS[name]
        met = value < target if name.endswith("_ms") else value >= target
        out[name] = {
            "value": value,
            "target": f"{'<' if name.endswith('_ms') else '>='} {target}",
            "met": met,
        }
    return out


async def _run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        server = NatsServer(tmp).start()
        try:
            bus = await Bus.connect(server.url, name="bench")
            try:
                progress(f"nats-server at {server.url}")
                publish = await bench_publish(server.url, bus)
                hop = await bench_hop(bus)
                replayed = await bench_replay(server.url, bus)
            finally:
                await bus.close()
        finally:
            server.stop()
    return {
        "publish": publish,
        "hop": hop,
        "replay": replayed,
        "targets": verdicts(publish, hop, replayed),
    }


def run() -> dict[str, Any]:
    """The `bus` section of `make bench`."""
    telemetry.shutdown()  # measure from a known state: tracing off unless a variant turns it on
    return asyncio.run(_run())


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
