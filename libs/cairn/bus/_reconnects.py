"""nats-py's reconnects without a socket left open per failed attempt.

nats-py keeps one `TcpTransport` per client and, on every reconnect attempt, opens a new
connection in it over the last one without closing it. An attempt that got as far as the
TCP (or TLS) connection and then failed (a server that refuses the credential, or decides
nothing because its authority is down) leaves that socket open until the garbage collector
finds its writer: a service waiting out a 30 s authority outage held over a hundred sockets,
and their `ResourceWarning`s surfaced in whatever ran when they were collected. Here the
previous connection of the transport is closed before a new one is opened. Applied once,
when `cairn.bus` first imports nats (`_lazyws`).
"""

from __future__ import annotations

from typing import Any


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
