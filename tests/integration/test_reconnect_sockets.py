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
        await bus.close()
    assert attempts >= 4
    assert unclosed == [], unclosed
