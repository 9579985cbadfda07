"""A connection that keeps failing to reconnect leaves no socket open per attempt
(`cairn.bus._reconnects`): after its server is gone, something answers on its port and hangs
up at once (as a server does whose authority decides nothing), and every attempt's socket is
closed, none left for the garbage collector to find."""

from __future__ import annotations

import asyncio
import gc
import warnings

from cairn.bus import Bus
from cairn.runtime.natsserver import NatsServer


async def test_failed_reconnect_attempts_leave_no_socket_open(nats_server: NatsServer) -> None:
    with warnings.catch_warnings():  # what earlier tests left is not this test's to judge
        warnings.simplefilter("ignore")
        gc.collect()
    bus = await Bus.connect(nats_server.url, name="reconnecting")
    attempts = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        writer.close()

    try:
        nats_server.stop()
        impostor = await asyncio.start_server(hang_up, nats_server.host, nats_server.port)
        try:
            async with asyncio.timeout(30):
                while attempts < 4:  # nats-py tries again every 0.25 s
                    await asyncio.sleep(0.05)
        finally:
            impostor.close()
            await impostor.wait_closed()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            gc.collect()
        unclosed = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    finally:
        async with asyncio.timeout(30):
            await bus.close()
    assert attempts >= 4
    assert unclosed == [], unclosed


async def test_a_closed_connection_stops_reconnecting_even_if_a_cancel_was_swallowed(
        nats_server: NatsServer) -> None:
    """On Python 3.11 the one cancel nats-py's close sends its reconnect loop can be lost
    (`wait_for` hands back a refused attempt's error instead), and the loop then retries
    forever on a closed client: the event loop of whatever closed it never finishes. Here the
    loop swallows its first cancel as that race does; closing still ends it."""
    disconnected, running, swallowed = asyncio.Event(), asyncio.Event(), asyncio.Event()
    bus = await Bus.connect(nats_server.url, name="closing-while-reconnecting",
                            on_event=lambda kind: disconnected.set()
                            if kind == "disconnected" else None)

    async def stubborn_reconnect() -> None:
        running.set()
        while True:
            try:
                await asyncio.sleep(0.25)
            except asyncio.CancelledError:
                if swallowed.is_set():
                    raise
                swallowed.set()  # the lost cancel: go on trying, as nats-py then does

    nats_server.stop()
    async with asyncio.timeout(30):
        await disconnected.wait()
    nats_py_own = bus.nc._reconnection_task
    stubborn = asyncio.get_running_loop().create_task(stubborn_reconnect())
    bus.nc._reconnection_task = stubborn
    await running.wait()  # it runs, as nats-py's loop does
    try:
        async with asyncio.timeout(30):
            await bus.close()
        assert swallowed.is_set(), "the close sent no cancel at all"
        assert stubborn.done(), "a closed connection's reconnect loop still runs"
    finally:
        for task in (stubborn, nats_py_own):
            if task is not None:
                task.cancel()
