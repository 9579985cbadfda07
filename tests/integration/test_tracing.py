"""One trace across the bus: PRODUCER span at publish, CONSUMER span at the handler, linked by
the `traceparent` header, exported over OTLP/HTTP to a receiver the test runs itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from cairn import events as ev
from cairn import subjects, telemetry
from cairn.bus import Bus, Delivery, Subscription
from tools.otlp_receiver import OtlpReceiver, ReceivedSpan

STUDY = "traced"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    """Tracing on, exporting to a loopback receiver; off again afterwards for other tests."""
    with OtlpReceiver() as r:
        try:
            assert telemetry.setup("test", endpoint=r.endpoint)
            yield r
        finally:
            telemetry.shutdown()
    assert not telemetry.enabled()


def one(spans: list[ReceivedSpan], kind: str, subject: str) -> ReceivedSpan:
    found = [
        s
        for s in spans
        if s.kind == kind and s.attributes.get("messaging.destination.name") == subject
    ]
    assert len(found) == 1, f"{kind} spans on {subject}: {found} (all: {spans})"
    return found[0]


async def test_trace_context_crosses_a_publish_consume_hop(
    bus: Bus, receiver: OtlpReceiver
) -> None:
    await bus.ensure_study(STUDY)
    submitted = ev.JobSubmitted(
        **ev.stamp(),
        source="test@hub",
        study=STUDY,
        job="j-1",
        name="demo",
        roles=[ev.RoleRequest(name="c", entrypoint="x")],
    )
    queued = ev.JobQueued(**ev.stamp(), source="test@hub", study=STUDY, job="j-1")
    deliveries: list[Delivery] = []
    done = asyncio.Event()

    async def handler(event: ev.StudyStreamEvent, delivery: Delivery) -> None:
        if isinstance(event, ev.JobSubmitted):
            deliveries.append(delivery)
            # Published while handling: the next hop continues the same trace.
            await bus.publish(queued)
            done.set()

    sub = Subscription(
        bus,
        stream=subjects.study_stream(STUDY).name,
        durable="tracing",
        filters=[subjects.study_jobs(STUDY)],
        decoder=ev.STUDY_DECODER,
        handler=handler,
        fetch_timeout=0.2,
    )
    await sub.start()
    try:
        await bus.publish(submitted)
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await sub.stop()
    await asyncio.to_thread(telemetry.shutdown)  # flushes the batch to the receiver

    spans = receiver.spans()
    hop = subjects.subject_of(submitted)
    producer = one(spans, "PRODUCER", hop)
    consumer = one(spans, "CONSUMER", hop)
    assert consumer.trace_id == producer.trace_id
    assert consumer.parent_span_id == producer.span_id
    assert producer.parent_span_id == "", "a publish outside any span starts a trace"
    for span in (producer, consumer):
        assert span.service == "test"
        assert span.attributes["messaging.system"] == "nats"
        assert span.attributes["messaging.message.id"] == submitted.id
    assert consumer.attributes["messaging.consumer.group.name"] == "tracing"
    traceparent = deliveries[0].headers[telemetry.TRACEPARENT]
    assert traceparent.split("-")[1:3] == [producer.trace_id, producer.span_id]

    follow_up = one(spans, "PRODUCER", subjects.subject_of(queued))
    assert follow_up.trace_id == producer.trace_id
    assert follow_up.parent_span_id == consumer.span_id


async def hop(bus: Bus, study: str, incoming: dict[str, str], tracing: bool) -> dict[str, str]:
    """Publish an event with `incoming` headers; its handler publishes another: the headers
    that second one went out with."""
    await bus.ensure_study(study)
    first = ev.JobQueued(**ev.stamp(), source="test@hub", study=study, job="j-1")
    second = ev.JobQueued(**ev.stamp(), source="test@hub", study=study, job="j-2")
    seen: dict[str, Delivery] = {}
    done = asyncio.Event()

    async def handler(event: ev.StudyStreamEvent, delivery: Delivery) -> None:
        seen[event.id] = delivery
        if event.id == first.id:
            await bus.publish(second)
        else:
            done.set()

    with OtlpReceiver() as receiver:
        if tracing:
            assert telemetry.setup("test", endpoint=receiver.endpoint)
        try:
            sub = Subscription(bus, stream=subjects.study_stream(study).name, durable="state",
                               filters=[subjects.study_jobs(study)], decoder=ev.STUDY_DECODER,
                               handler=handler, fetch_timeout=0.2)
            await sub.start()
            try:
                await bus.publish_bytes(subjects.subject_of(first), ev.encode(first),
                                        msg_id=first.id, headers=incoming)
                await asyncio.wait_for(done.wait(), 10)
            finally:
                await sub.stop()
        finally:
            telemetry.shutdown()
    return dict(seen[second.id].headers)


TRACE_ID, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT}-01"


@pytest.mark.parametrize("tracing", [False, True], ids=["tracing-off", "tracing-on"])
async def test_tracestate_travels_with_the_trace(bus: Bus, tracing: bool) -> None:
    """A caller's W3C `tracestate` (vendor data) crosses a hop, whether this side traces or
    only passes the context on."""
    headers = await hop(bus, f"state-{'on' if tracing else 'off'}",
                        {telemetry.TRACEPARENT: VALID,
                         telemetry.TRACESTATE: "vendor=abc,other=1"}, tracing)
    assert headers[telemetry.TRACESTATE] == "vendor=abc,other=1"
    assert headers[telemetry.TRACEPARENT].split("-")[1] == TRACE_ID


@pytest.mark.parametrize("tracing", [False, True], ids=["tracing-off", "tracing-on"])
@pytest.mark.parametrize(("name", "incoming", "kept"), [
    ("garbage", {telemetry.TRACEPARENT: "x" * 5000, telemetry.TRACESTATE: "a=b"}, set()),
    ("zero-trace", {telemetry.TRACEPARENT: f"00-{'0' * 32}-{PARENT}-01"}, set()),
    ("huge-state", {telemetry.TRACEPARENT: VALID, telemetry.TRACESTATE: "a=" + "b" * 60000},
     {telemetry.TRACEPARENT}),
])
async def test_a_malformed_trace_context_is_not_passed_on(
        bus: Bus, tracing: bool, name: str, incoming: dict[str, str], kept: set[str]) -> None:
    """A sender's bad or oversized trace headers go no further than the first hop: what the
    handler publishes next carries none of them (or only the valid traceparent's trace)."""
    headers = await hop(bus, f"bad-{name}-{'on' if tracing else 'off'}", incoming, tracing)
    sent = {k for k in (telemetry.TRACEPARENT, telemetry.TRACESTATE) if k in headers}
    if tracing and not kept:
        # Tracing on: the handler's span starts a new trace of its own.
        assert sent == {telemetry.TRACEPARENT}
        assert headers[telemetry.TRACEPARENT] != incoming[telemetry.TRACEPARENT]
    else:
        assert sent == kept
    if kept:
        assert headers[telemetry.TRACEPARENT].split("-")[1] == TRACE_ID
