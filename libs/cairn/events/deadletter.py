"""The dead-letter wrapper: a message a consumer could not handle, kept whole."""

from __future__ import annotations

from cairn.events.base import Event


class DeadLettered(Event, tag="deadletter.event", frozen=True, kw_only=True):
    """An undecodable event, or one whose handler failed on its last delivery.

    Attributes:
        stream: The stream it came from.
        subject: Its original subject (redrive publishes there again).
        consumer: The durable consumer that gave up on it.
        stream_seq: Its sequence in the original stream.
        deliveries: How many times it was delivered.
        headers: Its original headers.
        payload_b64: Its original payload, base64.
        error: Why it was dead-lettered.
    """

    stream: str
    subject: str
    consumer: str
    stream_seq: int = 0
    deliveries: int = 1
    headers: dict[str, str] = {}
    payload_b64: str = ""
    error: str = ""
