"""A reply lost on the way (as when the authority renews a connection just as it is answered)
costs a read one more ask and a write nothing it did not already do: a read is asked again,
signed afresh, and a write is never sent twice (it may have been applied). A request that
nothing received ("nothing answers") is asked again, read or write, for a moment."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from cairn import api
from cairn import events as ev
from cairn.bus import Bus
from cairn.client import Client
from cairn.errors import Timeout, Unavailable
from cairn.runtime.natsserver import NatsServer
from cairn.state.study import StudyState


async def _responder(server: NatsServer, subject: str, seen: list[bytes]) -> Bus:
    """Answers `subject` from the second request on: the first one's reply is lost."""
    bus = await Bus.connect(server.url, name="lossy-responder")

    async def on_msg(msg: object) -> None:
        seen.append(msg.data)  # type: ignore[attr-defined]
        if len(seen) > 1:
            await bus.nc.publish(msg.reply,  # type: ignore[attr-defined]
                                 api.encode_result(api.StudyResult(study=StudyState(name="demo"))))

    await bus.nc.subscribe(subject, cb=on_msg)
    await bus.nc.flush()
    return bus


async def test_a_read_whose_reply_was_lost_is_asked_once_more(nats_server: NatsServer) -> None:
    seen: list[bytes] = []
    responder = await _responder(nats_server, "cairn.api.study.demo.show", seen)
    client = Client(await Bus.connect(nats_server.url, name="reader"), study="demo",
                    request_timeout=0.5)
    try:
        shown = await client.call_study(api.StudyShow())
        assert isinstance(shown, api.StudyResult) and shown.study.name == "demo"
        assert len(seen) == 2, "asked once more after the lost reply"
    finally:
        await client.close()
        await responder.close()


async def test_a_write_whose_reply_was_lost_is_not_sent_again(nats_server: NatsServer) -> None:
    seen: list[bytes] = []
    responder = await _responder(nats_server, "cairn.api.study.demo.cancel", seen)
    client = Client(await Bus.connect(nats_server.url, name="writer"), study="demo",
                    request_timeout=0.5)
    try:
        try:
            await client.call_study(api.JobCancel(job="j-1"))
        except Timeout:
            pass
        else:
            raise AssertionError("a write whose reply was lost must say so")
        await responder.nc.flush()
        assert len(seen) == 1, "a cancel that may have been applied is not sent twice"
    finally:
        await client.close()
        await responder.close()


@pytest.mark.parametrize("request_", [api.StudyShow(), api.JobCancel(job="j-1")],
                         ids=["read", "write"])
async def test_a_request_waits_a_moment_for_a_service_that_reconnects(
        nats_server: NatsServer, request_: api.Request) -> None:
    """Nothing answers for a moment (a service reconnecting after its session was renewed, as
    right after a study is created): a read or a write asks until it does, since "nothing
    answers" means nothing received it; when nothing ever answers, that is the answer."""
    client = Client(await Bus.connect(nats_server.url, name="asker"), study="demo",
                    request_timeout=2)
    later = await Bus.connect(nats_server.url, name="late-responder")
    verb = api.verb_of(request_)
    seen: list[bytes] = []

    async def answer(msg: object) -> None:
        seen.append(msg.data)  # type: ignore[attr-defined]
        await later.nc.publish(msg.reply,  # type: ignore[attr-defined]
                               api.encode_result(api.StudyResult(study=StudyState(name="demo"))))

    async def come_back() -> None:
        await asyncio.sleep(0.5)
        await later.nc.subscribe(f"cairn.api.study.demo.{verb}", cb=answer)
        await later.nc.flush()

    try:
        with pytest.raises(Unavailable, match="nothing answers"):
            await client.call_study(request_)
        back = asyncio.ensure_future(come_back())
        answered = await client.call_study(request_)
        await back
        assert isinstance(answered, api.StudyResult)
        assert len(seen) == 1, "asked until answered, and answered once"
    finally:
        await client.close()
        await later.close()


async def test_reading_events_on_a_connection_closed_for_good_is_unavailable(
        nats_server: NatsServer) -> None:
    """nats closes a connection for good on some refusals (an authorization error when it
    reconnects to another server of a cluster): a reader then gets Cairn's Unavailable, which
    it can catch and reconnect on, not the client library's own error."""
    bus = await Bus.connect(nats_server.url, name="closed-reader")
    await bus.ensure_study("demo")
    client = Client(bus, study="demo")
    await bus.nc.close()
    with pytest.raises(Unavailable, match="connection to NATS is closed"):
        async for _ in client.events():
            pass


async def test_following_events_ends_once_its_connection_is_closed_for_good(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower rides out a server that does not answer for a while; a connection that
    closed for good never answers again, so it says so at once, and its caller reconnects
    (as `cairn events --follow` run again does), instead of trying the dead one on."""
    from cairn.client import history

    monkeypatch.setattr(history, "FOLLOW_OUTAGE_S", 3600.0)  # only the closed connection ends it
    bus = await Bus.connect(nats_server.url, name="closed-follower")
    await bus.ensure_study("demo")
    await bus.publish(msgspec.convert(
        {"type": "study.created", "id": "s-1", "at": "2026-01-01T00:00:00Z", "study": "demo",
         "source": "coordinator@hub", "name": "demo", "sites": [], "admins": []},
        ev.StudyCreated))
    client = Client(bus, study="demo")
    following = client.events(follow=True, poll=0.05)
    async with asyncio.timeout(60):
        first = await anext(following)  # the backlog: from here on it polls for new events
        assert first.type == "study.created"
        await bus.nc.close()
        with pytest.raises(Unavailable, match="connection to NATS is closed"):
            await anext(following)
