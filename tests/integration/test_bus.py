"""The bus against a real nats-server: dedup, redelivery, dead letters, replay, restarts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from cairn import events as ev
from cairn import subjects
from cairn.bus import Bus, Delivery, Subscription, kv, objects, replay
from cairn.bus._objects import Objects, object_store_layout
from cairn.runtime.natsserver import NatsServer

STUDY = "lung"


def submitted(job: str = "j-1", name: str = "demo") -> ev.JobSubmitted:
    return ev.JobSubmitted(**ev.stamp(), source="test@hub", study=STUDY, job=job, name=name,
                           roles=[ev.RoleRequest(name="client", entrypoint="python x.py")])


async def count_stored(bus: Bus, stream: str) -> int:
    info = await bus.js.stream_info(stream)
    return int(info.state.messages)


async def test_republished_event_is_stored_once(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    event = submitted()
    first = await bus.publish(event)
    second = await bus.publish(event)
    assert first == second
    assert await count_stored(bus, f"STUDY_{STUDY}") == 1


async def test_unacked_event_is_redelivered_and_poison_goes_to_dead_letter(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    seen: list[tuple[str, int]] = []
    fail_once = {"j-flaky"}

    async def handler(event: ev.StudyStreamEvent, d: Delivery) -> None:
        assert isinstance(event, ev.JobSubmitted)
        seen.append((event.job, d.deliveries))
        if event.job in fail_once:
            fail_once.discard(event.job)
            raise RuntimeError("transient")
        if event.job == "j-poison":
            raise ValueError("always fails")

    sub = Subscription(bus, stream=f"STUDY_{STUDY}", durable="t1",
                       filters=[subjects.study_jobs(STUDY)], decoder=ev.STUDY_DECODER,
                       handler=handler, max_deliver=3, backoff=[0.05])
    await sub.start()
    for job in ("j-flaky", "j-poison", "j-after"):
        await bus.publish(submitted(job))
    # Garbage that is not an event at all.
    await bus.publish_bytes(subjects.job(STUDY, "j-garbage", "submitted"), b"{not json",
                            msg_id="garbage-1")
    await bus.publish(submitted("j-last"))
    for _ in range(200):
        if ("j-last", 1) in seen and sub.dead_lettered == 2:
            break
        await asyncio.sleep(0.05)
    await sub.stop()
    assert ("j-flaky", 2) in seen, "a failed delivery is redelivered"
    assert [d for j, d in seen if j == "j-poison"] == [1, 2, 3]
    assert ("j-after", 1) in seen and ("j-last", 1) in seen, "the consumer keeps going"
    dead = [r.event async for r in replay(bus, "DEADLETTER", ev.DEADLETTER_DECODER)]
    assert {d.subject for d in dead if d} == {
        subjects.job(STUDY, "j-poison", "submitted"), subjects.job(STUDY, "j-garbage", "submitted")}
    assert all(d and d.consumer == "t1" and d.error for d in dead)


async def test_replay_from_sequence_and_time(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    for i in range(5):
        await bus.publish(submitted(f"j-{i}"))
    mid = datetime.now(UTC)
    await asyncio.sleep(0.01)
    for i in range(5, 8):
        await bus.publish(submitted(f"j-{i}"))
    stream = f"STUDY_{STUDY}"
    everything = [r async for r in replay(bus, stream, ev.STUDY_DECODER)]
    assert [r.seq for r in everything] == list(range(1, 9))
    from_seq = [r.seq async for r in replay(bus, stream, ev.STUDY_DECODER, start_seq=6)]
    assert from_seq == [6, 7, 8]
    from_time = [r.seq async for r in replay(bus, stream, ev.STUDY_DECODER, start_time=mid)]
    assert from_time == [6, 7, 8]
    one = [r async for r in replay(bus, stream, ev.STUDY_DECODER,
                                   filters=[subjects.job_all(STUDY, "j-3")])]
    assert [r.event.job for r in one if isinstance(r.event, ev.JobSubmitted)] == ["j-3"]


async def test_a_replay_whose_fetches_time_out_still_reads_everything_once(bus: Bus) -> None:
    """A busy server answers a fetch after the replay stopped waiting: the replay reads on
    from the last message it yielded, never stops short and never yields one twice."""
    await bus.ensure_study(STUDY)
    for i in range(300):
        await bus.publish(submitted(f"j-{i}"))
    # Fetches that can hardly ever complete in time: most of them time out.
    seqs = [r.seq async for r in replay(bus, f"STUDY_{STUDY}", ev.STUDY_DECODER, batch=7,
                                        fetch_timeout=0.00005)]
    assert seqs == list(range(1, 301))


async def test_server_killed_and_restarted_mid_stream_loses_nothing(
        nats_server: NatsServer) -> None:
    bus = await Bus.connect(nats_server.url, name="restart")
    await bus.ensure_study(STUDY)
    got: list[str] = []

    async def handler(event: ev.StudyStreamEvent, d: Delivery) -> None:
        assert isinstance(event, ev.JobSubmitted)
        got.append(event.job)

    sub = Subscription(bus, stream=f"STUDY_{STUDY}", durable="r1",
                       filters=[subjects.study_jobs(STUDY)], decoder=ev.STUDY_DECODER,
                       handler=handler, fetch_timeout=0.5)
    await sub.start()
    sent = [f"j-{i}" for i in range(60)]

    async def produce() -> None:
        for job in sent:
            await bus.publish(submitted(job), timeout=30)
            await asyncio.sleep(0.005)

    producer = asyncio.create_task(produce())
    async with asyncio.timeout(60):  # bounded: the first 20 arrive long before
        while len(got) < 20:
            await asyncio.sleep(0.01)
    await asyncio.to_thread(nats_server.kill)
    await asyncio.sleep(0.3)
    await asyncio.to_thread(nats_server.start)
    await asyncio.wait_for(producer, 60)
    for _ in range(400):
        if set(got) >= set(sent):
            break
        await asyncio.sleep(0.05)
    await sub.stop()
    await bus.close()
    assert set(got) == set(sent)


async def test_graceful_stop_leaves_nothing_unacked(bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    started = asyncio.Event()

    async def slow(event: ev.StudyStreamEvent, d: Delivery) -> None:
        started.set()
        await asyncio.sleep(0.05)

    sub = Subscription(bus, stream=f"STUDY_{STUDY}", durable="g1",
                       filters=[subjects.study_jobs(STUDY)], decoder=ev.STUDY_DECODER,
                       handler=slow, batch=10)
    await sub.start()
    for i in range(10):
        await bus.publish(submitted(f"j-{i}"))
    await started.wait()
    await sub.stop()
    info = await bus.js.consumer_info(f"STUDY_{STUDY}", "g1")
    assert info.num_ack_pending == 0
    assert sub.processed + info.num_pending == 10


async def test_a_stop_ends_the_idle_long_poll_and_leaves_nothing_unacked(bus: Bus) -> None:
    """A stop does not wait for an idle consumer's poll to run out (a minute here), and what
    the server hands over while the consumer stops is handled and acked, or given back for
    the next instance at once: nothing waits for ack_wait to come back."""
    await bus.ensure_study(STUDY)
    handled: list[str] = []

    async def handler(event: ev.StudyStreamEvent, d: Delivery) -> None:
        assert isinstance(event, ev.JobSubmitted)
        handled.append(event.job)

    def consumer() -> Subscription[ev.StudyStreamEvent]:
        return Subscription(bus, stream=f"STUDY_{STUDY}", durable="p1",
                            filters=[subjects.study_jobs(STUDY)], decoder=ev.STUDY_DECODER,
                            handler=handler, fetch_timeout=60, ack_wait=60)

    sub = consumer()
    await sub.start()
    while (await bus.js.consumer_info(f"STUDY_{STUDY}", "p1")).num_waiting < 1:
        await asyncio.sleep(0.01)  # until the server holds its poll: idle, nothing to fetch
    await asyncio.wait_for(sub.stop(), timeout=20)
    assert handled == []

    # Events published while consumers stop, again and again: each stop takes what its
    # poll was handed and acks it; what the server hands over after it is nak'd, and the rest
    # stays in the stream for the next one.
    sent = 0
    for round_ in range(5):
        sub = consumer()
        await sub.start()
        publishing = [asyncio.ensure_future(bus.publish(submitted(f"j-{round_}-{i}")))
                      for i in range(4)]
        await asyncio.wait_for(sub.stop(), timeout=20)
        await asyncio.gather(*publishing)
        sent += len(publishing)
        assert len(set(handled)) == len(handled) <= sent

    # The next instance gets every event at once, none held back for ack_wait (a minute): a
    # message left with an inbox nobody reads would come back only then.
    everything = asyncio.Event()

    async def last_handler(event: ev.StudyStreamEvent, d: Delivery) -> None:
        await handler(event, d)
        if len(handled) >= sent:
            everything.set()

    sub = Subscription(bus, stream=f"STUDY_{STUDY}", durable="p1",
                       filters=[subjects.study_jobs(STUDY)], decoder=ev.STUDY_DECODER,
                       handler=last_handler, fetch_timeout=60, ack_wait=60)
    await sub.start()
    if len(handled) < sent:
        await asyncio.wait_for(everything.wait(), timeout=30)
    await asyncio.wait_for(sub.stop(), timeout=20)
    assert sorted(handled) == sorted(f"j-{r}-{i}" for r in range(5) for i in range(4))
    info = await bus.js.consumer_info(f"STUDY_{STUDY}", "p1")
    assert (info.num_ack_pending, info.num_pending) == (0, 0)


async def test_kv_and_object_store(bus: Bus) -> None:
    sites = await kv(bus, subjects.KV_SITES, dict[str, int])
    await sites.put("site-a", {"free": 3})
    assert await sites.get("site-a") == {"free": 3}
    assert await sites.get("nope") is None
    store = await objects(bus, subjects.obj_artifacts(STUDY))
    payload = bytes(range(256)) * 8192  # 2 MiB: chunked by the store
    digest = await store.put(payload)
    assert await store.get(digest) == payload


@pytest.mark.parametrize("bad", ["s1.>", "*", "A", "a.b", ""])
def test_bad_names_never_become_subjects(bad: str) -> None:
    from cairn.errors import InvalidName

    for build in (subjects.study_all, subjects.study_stream, subjects.data_all,
                  lambda n: subjects.heartbeat(n), lambda n: subjects.job(STUDY, n, "x")):
        with pytest.raises(InvalidName):
            build(bad)


async def test_a_store_made_a_moment_later_is_waited_for_not_raised(bus: Bus) -> None:
    # As a study's artifacts, made by the authority a moment after the study was created:
    # an upload that asks first (nothing answers yet: no responders) waits for it.
    bucket = subjects.obj_artifacts("later")
    store = Objects(bus, object_store_layout(bucket))

    async def make_it() -> None:
        await asyncio.sleep(0.5)
        await bus.js.create_object_store(bucket)

    maker = asyncio.create_task(make_it())
    digest = await store.put(b"bundle")
    await maker
    assert await store.info(digest) is not None
    assert await store.get(digest) == b"bundle"
