"""What the bus can carry: a request too large for the server is refused before it is sent."""

from __future__ import annotations

from cairn.errors import InvalidInput

# Room kept under the server's max_payload for what a service adds around a request's
# arguments when it records them (the job.submitted envelope: ids, times, actor).
ENVELOPE_ROOM = 16 * 1024


def payload_limit(max_payload: int) -> int:
    """The largest request, in bytes, whose recorded event still fits in `max_payload`."""
    return max(max_payload - ENVELOPE_ROOM, max_payload // 2)


def check_fits(size: int, max_payload: int, subject: str, *, file: str | None = None) -> None:
    """Raise unless a request of `size` bytes on `subject` fits.

    Raises:
        InvalidInput: naming the size, the limit and where it comes from (and `file`).
    """
    limit = payload_limit(max_payload)
    if size > limit:
        raise InvalidInput(
            f"the request on {subject} is {size} bytes; the bus carries at most {limit} "
            f"(the NATS server's max_payload of {max_payload} bytes, less "
            f"{max_payload - limit} for the event recorded around it)", file=file)

