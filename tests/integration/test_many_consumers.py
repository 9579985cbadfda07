"""A study's stream holds a durable consumer per site and service: more than the 1,000 that
nats-server 2.15 allows a stream that names no limit (the thousandth simulated site of a
federation could not start). Cairn's streams name their own (`cairn.bus._streams`), and one
made before, without it, is brought to it."""

from __future__ import annotations

import asyncio

from nats.js import api

from cairn import subjects
from cairn.bus import Bus
from cairn.bus._streams import MAX_CONSUMERS, stream_config

STUDY = "crowded"
CONSUMERS = 1_050


async def _add_consumers(bus: Bus, stream: str, n: int) -> None:
    at_once = asyncio.Semaphore(64)

    async def one(index: int) -> None:
        async with at_once:
            await bus.js.add_consumer(stream, api.ConsumerConfig(
                durable_name=f"site-{index}", ack_policy=api.AckPolicy.EXPLICIT,
                filter_subject=subjects.site_cmds(STUDY, f"site-{index}")))

    await asyncio.gather(*(one(i) for i in range(n)))


async def test_a_study_stream_takes_a_durable_consumer_for_each_of_a_thousand_sites(
        bus: Bus) -> None:
    await bus.ensure_study(STUDY)
    stream = subjects.study_stream(STUDY).name
    try:
        await _add_consumers(bus, stream, CONSUMERS)
        info = await bus.js.stream_info(stream)
        assert info.state.consumer_count == CONSUMERS
        assert info.config.max_consumers == MAX_CONSUMERS
    finally:
        await bus.js.delete_stream(stream)  # a server with a thousand consumers stops slowly


async def test_a_stream_made_without_the_limit_is_brought_to_it(bus: Bus) -> None:
    spec = subjects.study_stream(STUDY)
    old = stream_config(spec)
    old.max_consumers = None  # as every stream was made before: the server's default
    await bus.js.add_stream(old)
    await bus.ensure_study(STUDY)
    assert (await bus.js.stream_info(spec.name)).config.max_consumers == MAX_CONSUMERS
