"""Dead letters: messages a consumer gave up on, kept whole in DEADLETTER, and redrive.

Redrive publishes the original payload and headers to the original subject again with a new
message id (`<original id>-redrive-<dead-letter seq>`, so a repeated redrive of the same dead
letter is dropped by JetStream's dedup window), then deletes the dead letter.
"""

from __future__ import annotations

import base64

import msgspec

from cairn import subjects
from cairn.bus import MSG_ID, Bus, replay
from cairn.errors import InvalidInput, NotFound
from cairn.events import DEADLETTER_DECODER, DeadLettered
from cairn.events.decoding import decode_with

STREAM = subjects.DEADLETTER_STREAM.name


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """One message of the DEADLETTER stream; `event` is None when it does not decode."""

    seq: int
    event: DeadLettered | None
    error: str | None = None


async def list_all(bus: Bus) -> list[DeadLetter]:
    """Every message kept in DEADLETTER (none when the stream was never created)."""
    out: list[DeadLetter] = []
    try:
        async for r in replay(bus, STREAM, DEADLETTER_DECODER):
            out.append(DeadLetter(seq=r.seq, event=r.event, error=r.error))
    except NotFound:
        return []
    return out


async def read(bus: Bus, seq: int) -> DeadLetter:
    """One dead letter by its DEADLETTER sequence (raises `NotFound`)."""
    _, _, data = await get_message(bus, STREAM, seq)
    try:
        return DeadLetter(seq=seq, event=decode_with(DEADLETTER_DECODER, data))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return DeadLetter(seq=seq, event=None, error=str(exc))


async def redrive(bus: Bus, seq: int, *, publish_timeout: float = 10.0) -> int:
    """Put a dead letter back on its original subject, then delete it; returns the new
    sequence in the original stream."""
    dead = await read(bus, seq)
    if dead.event is None:
        raise InvalidInput(f"dead letter {seq} cannot be decoded: {dead.error}")
    ev = dead.event
    original = ev.headers.get(MSG_ID) or f"{ev.stream}-{ev.stream_seq}"
    # Nats-* headers are the server's (ids, expectations): the new message gets its own.
    headers = {k: v for k, v in ev.headers.items() if not k.lower().startswith("nats-")}
    try:
        payload = base64.b64decode(ev.payload_b64, validate=True)
    except ValueError:
        raise InvalidInput(f"dead letter {seq} holds no base64 payload",
                           field="payload_b64") from None
    new_seq = await bus.publish_bytes(
        ev.subject,
        payload,
        msg_id=f"{original}-redrive-{seq}",
        headers=headers or None,
        timeout=publish_timeout,
    )
    await delete_message(bus, STREAM, seq)
    return new_seq


# -- stream messages by sequence ----------------------------------------------------------------


async def get_message(bus: Bus, stream: str, seq: int) -> tuple[str, dict[str, str], bytes]:
    """One stored message: (subject, headers, data). Raises NotFound when absent."""
    return await bus.get_message(stream, seq)


async def delete_message(bus: Bus, stream: str, seq: int) -> None:
    """Delete one stored message. Raises NotFound when absent."""
    await bus.delete_message(stream, seq)
