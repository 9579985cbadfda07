"""nats-py's reconnects without a socket left open per failed attempt.

nats-py keeps one `TcpTransport` per client and, on every reconnect attempt, opens a new
connection in it over the last one without closing it. An attempt that got as far as the
TCP (or TLS) connection and then failed (a server that refuses the credential, or decides
nothing because its authority is down) leaves that socket open until the garbage collector
finds its writer: a service waiting out a 30 s authority outage held over a hundred sockets,
and their `ResourceWarning`s surfaced in whatever ran when they were collected. Here the
previous connection of the transport is closed before a new one is opened. Applied once,
when `cairn.bus` first imports nats (`_lazyws`).

And a closed client's reconnect loop is made to end: on Python 3.11, `asyncio.wait_for`
returns the inner result (here the refused connection's `OSError`) when a cancellation
arrives just as the connection attempt fails, so the one cancel nats-py's `close()` sends
can be swallowed; its server selection then catches that `OSError` and tries again every
0.25 s, forever, on a client already closed (a service that never finishes shutting down,
an event loop that never closes). `end_reconnecting` cancels until the loop has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

END_RECONNECTING_S = 5.0


def close_before_reconnect() -> None:
    """Make `TcpTransport.connect` close the transport's previous connection first."""
    from nats.aio.transport import TcpTransport

    original = TcpTransport.connect
    if getattr(original, "_cairn_closes_previous", False):
        return

    async def connect(self: Any, *args: Any, **kwargs: Any) -> Any:
        for writer in {id(w): w for w in (self._io_writer, self._bare_io_writer)
                       if w is not None}.values():
            if not writer.is_closing():
                writer.close()
        self._io_writer = self._bare_io_writer = None
        self._io_reader = self._bare_io_reader = None
        return await original(self, *args, **kwargs)

    connect._cairn_closes_previous = True  # type: ignore[attr-defined]
    TcpTransport.connect = connect  # type: ignore[method-assign]


async def end_reconnecting(client: Any) -> None:
    """After `client.close()`: cancel its reconnect loop until it has really ended (bounded).

    A cancel lands in the loop's next await (its 0.25 s back-off at the latest), so a loop
    that swallowed one ends at the next; one that outlives `END_RECONNECTING_S` is left."""
    task: asyncio.Task[None] | None = getattr(client, "_reconnection_task", None)
    if task is None or task is asyncio.current_task():
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + END_RECONNECTING_S
    while not task.done() and loop.time() < deadline:
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
