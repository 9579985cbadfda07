"""nats-py without its websocket transport's imports until a `ws://` URL needs them.

nats-py imports aiohttp (and multidict) when it is imported, wherever aiohttp is installed
(the Kubernetes client brings it), for its websocket transport alone: about 0.2 CPU-s in
every process that connects over `nats://` or `tls://`, which is every `cairn up` parent.
So the first import of nats here hides aiohttp from it, and `enable_websockets` hands it
over when a connection asks for `ws://` or `wss://`. Imported by `cairn.bus` before any
other module that imports nats.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _import_nats() -> None:
    from cairn.bus._reconnects import close_before_reconnect

    if "aiohttp" in sys.modules or "nats" in sys.modules:
        import nats.aio.transport  # noqa: F401 - as it would be imported anyway
        close_before_reconnect()
        return
    # A None entry makes `import aiohttp` raise ImportError, as if it were not installed.
    sys.modules["aiohttp"] = None  # type: ignore[assignment]
    try:
        import nats.aio.transport  # noqa: F401
    finally:
        if "aiohttp" in sys.modules and sys.modules["aiohttp"] is None:
            del sys.modules["aiohttp"]
    close_before_reconnect()


def enable_websockets(servers: Sequence[str]) -> None:
    """Give nats-py its websocket transport's modules if one of `servers` is a ws URL."""
    if not any(s.strip().lower().startswith(("ws://", "wss://")) for s in servers):
        return
    import nats.aio.transport as transport

    if getattr(transport, "aiohttp", None) is not None:
        return
    try:
        import aiohttp
        import multidict
    except ImportError:
        return  # nats-py says what to install when it connects
    setattr(transport, "aiohttp", aiohttp)  # noqa: B010 - not exported by nats-py
    setattr(transport, "multidict", multidict)  # noqa: B010


_import_nats()
