"""Reaching the bus a context file names, bounded in time (a command must fail, not hang)."""

from __future__ import annotations

import asyncio

from cairn.bus import Bus
from cairn.errors import Unavailable
from cairn.runtime import context as context_file


async def connect(ctx: context_file.Context, *, name: str, limit: float) -> Bus:
    """The bus of `ctx`, with its TLS and credentials.

    Raises:
        Unavailable: NATS did not answer within `limit` (plus a second).
    """
    try:
        # Bounded here too: nats.py keeps retrying an unreachable first server forever
        # when reconnects are allowed.
        return await asyncio.wait_for(
            Bus.connect(ctx.nats_url, name=name,
                        tls=context_file.tls_context(ctx.tls_ca, ctx.tls_cert, ctx.tls_key),
                        creds=ctx.creds, connect_timeout=limit),
            limit + 1.0)
    except TimeoutError:
        raise Unavailable(f"cannot reach NATS at {ctx.nats_url} (no answer within "
                          f"{limit + 1.0:g}s): is the federation up?") from None
