"""Pull requests against a real nats-server: each one followed to its end, none left open.

A request left open at the server takes the next message into an inbox that may be gone by
then; that message comes back only after ack_wait (a minute and more, seen by a user as a job
that stalls after a service restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from nats.aio.msg import Msg
from nats.js import api

from cairn import events as ev
from cairn import subjects
from cairn.bus import Bus
from cairn.bus._pull import Pulls

STUDY = "pulls"
STREAM = f"STUDY_{STUDY}"


def submitted(job: str) -> ev.JobSubmitted:
    return ev.JobSubmitted(**ev.stamp(), source="test@hub", study=STUDY, job=job, name="demo",
                           roles=[ev.RoleRequest(name="client", entrypoint="python x.py")])


async def consumer(bus: Bus, name: str) -> Pulls:
    await bus.ensure_study(STUDY)
    await bus.js.add_consumer(STREAM, api.ConsumerConfig(
        durable_name=name, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=60,
        filter_subject=subjects.study_jobs(STUDY)))
    pulls = Pulls(bus, stream=STREAM, durable=name)
    await pulls.subscribe()
    return pulls


async def waiting(bus: Bus, name: str) -> int:
    return int((await bus.js.consumer_info(STREAM, name)).num_waiting)


async def test_a_pull_that_returned_leaves_no_request_open_at_the_server(bus: Bus) -> None:
    """Long polls that expire, short pulls of an empty, a partial and a full backlog: when
    each returns, the server holds no request of this consumer, so no message can go where
    nobody reads."""
    pulls = await consumer(bus, "exact")
    for round_ in range(10):
        assert await pulls.pull(1, wait=0.05) == []
        assert await waiting(bus, "exact") == 0
        assert await pulls.pull(8) == []
        assert await waiting(bus, "exact") == 0
        for i in range(round_ % 3 * 4):  # none, 4 (fewer than the batch), 8 (the batch)
            await bus.publish(submitted(f"j-{round_}-{i}"))
        got = await pulls.pull(8)
        assert len(got) == round_ % 3 * 4
        assert await waiting(bus, "exact") == 0
        for msg in got:
            await msg.ack_sync()
    assert await pulls.close() == []


async def test_a_poll_cut_short_by_a_stop_is_taken_over_by_the_next_instance(
        bus: Bus) -> None:
    """A stop ends the wait, not the server's request: the next instance takes the stopped
    one's inbox over, request and all, so what the server hands to that request reaches it
    with its first delivery (neither given back and delivered again nor left for ack_wait),
    and so does what is stored after."""
    pulls = await consumer(bus, "cut")
    stop = asyncio.Event()
    poll = asyncio.ensure_future(pulls.pull(1, wait=60, stop=stop))
    while await waiting(bus, "cut") < 1:
        await asyncio.sleep(0.01)  # until the server holds the request
    stop.set()
    assert await poll == []
    assert await pulls.close() == []
    nxt = await consumer(bus, "cut")
    await bus.publish(submitted("j-racing"))  # handed to the stopped instance's request
    await bus.publish(submitted("j-late"))
    got: list[Msg] = []
    while len(got) < 2:
        more = await nxt.pull(1, wait=30)  # ack_wait is 60 s: nothing may wait for it
        assert more, f"only {len(got)} of 2 messages came before ack_wait"
        got += more
    assert sorted(json.loads(m.data)["job"] for m in got) == ["j-late", "j-racing"]
    assert [m.metadata.num_delivered for m in got] == [1, 1]
    for msg in got:
        await msg.ack_sync()
    info = await bus.js.consumer_info(STREAM, "cut")
    assert (info.num_ack_pending, info.num_pending, info.num_waiting) == (0, 0, 0)
    await nxt.close()


async def test_a_stored_message_that_claims_to_be_a_status_is_still_a_message(bus: Bus) -> None:
    """A publisher may put a `Status` header on what it stores: the consumer takes it as the
    message it is (to dead-letter), not as the server ending the request, which would leave
    the message unacked and the request's count wrong."""
    pulls = await consumer(bus, "forged")
    await bus.js.publish(subjects.study_jobs(STUDY).replace(">", "forged"), b"",
                         headers={"Status": "404", "Description": "No Messages"})
    await bus.publish(submitted("j-after"))
    got = await pulls.pull(8)
    assert len(got) == 2
    assert await waiting(bus, "forged") == 0
    for msg in got:
        await msg.ack_sync()
    await pulls.close()


async def test_a_slow_batch_sends_its_acks_as_it_goes(bus: Bus) -> None:
    """A batch's acks leave together, but none waits for a slow batch to end: a handler
    that takes its time never has the batch's first messages delivered again for it."""
    from cairn.bus import Delivery, Subscription
    from cairn.bus._consume import ACKS_HELD_S

    await bus.ensure_study(STUDY)
    for i in range(5):
        await bus.publish(submitted(f"j-slow-{i}"))
    seqs: dict[str, int] = {}
    floors: list[int] = []
    last_handled = asyncio.Event()

    async def floor() -> int:
        info = await bus.js.consumer_info(STREAM, "slow")
        return int(info.ack_floor.stream_seq if info.ack_floor else 0)

    async def handler(event: ev.StudyStreamEvent, d: Delivery) -> None:
        assert isinstance(event, ev.JobSubmitted)
        seqs[event.job] = d.stream_seq
        if event.job == "j-slow-3":
            # j-slow-1 .. -3 came in one batch (only a poll's first message comes alone),
            # and j-slow-1 and -2 were handled over ACKS_HELD_S ago: their acks reach the
            # server while the batch still runs.
            async def acked() -> int:
                while (seen := await floor()) < seqs["j-slow-2"]:
                    await asyncio.sleep(0.01)
                return seen

            with contextlib.suppress(TimeoutError):  # never: held to the batch's end
                floors.append(await asyncio.wait_for(acked(), 10))
        await asyncio.sleep(2 * ACKS_HELD_S)  # slow work, longer than acks are held
        if event.job == "j-slow-4":
            last_handled.set()

    sub = Subscription(bus, stream=STREAM, durable="slow", filters=[subjects.study_jobs(STUDY)],
                       decoder=ev.STUDY_DECODER, handler=handler, ack_wait=60)
    await sub.start()
    try:
        await asyncio.wait_for(last_handled.wait(), 30)
    finally:
        await sub.stop()
    assert floors and floors[0] >= seqs["j-slow-2"]
    info = await bus.js.consumer_info(STREAM, "slow")
    assert (info.num_ack_pending, info.num_redelivered) == (0, 0)

