"""Reading a worker's captured log from its site's launcher (request/reply, not stored).

Request on `cairn.api.site.<site>.logs`: `{"launch_id", "offset", "max_bytes"}`.
Reply: `{"ok": true, "result": {"data_b64", "offset", "done"}}` where `offset` is where the
next read starts and `done` means the worker exited and everything was read.
"""

from __future__ import annotations

import base64
from typing import NamedTuple

import msgspec

from cairn import subjects
from cairn.api import REPLY_DECODER
from cairn.bus import Bus
from cairn.errors import CairnError, from_dict


class LogChunk(NamedTuple):
    """Bytes of one worker's log; `error` says why a site's log could not be read."""

    site: str
    role: str
    rank: int
    data: bytes
    offset: int
    error: str | None = None


class _LogResult(msgspec.Struct, kw_only=True):
    data_b64: str = ""
    offset: int = 0
    done: bool = False


async def read_log_chunk(
    bus: Bus,
    site: str,
    role: str,
    rank: int,
    launch_id: str,
    offset: int,
    max_bytes: int,
    *,
    request_timeout: float = 10.0,
) -> tuple[LogChunk, bool]:
    """One read; returns the chunk and whether the log is finished.

    A launcher that does not answer, or answers with an error, gives a chunk with `error`
    set, so one unreachable site does not hide the logs of the others.
    """
    payload = msgspec.json.encode(
        {"launch_id": launch_id, "offset": offset, "max_bytes": max_bytes}
    )
    try:
        reply = REPLY_DECODER.decode(
            await bus.request(subjects.site_logs(site), payload, timeout=request_timeout)
        )
        if not reply.ok:
            raise from_dict(reply.error or {"message": "log read failed"})
        result = msgspec.convert(reply.result or {}, _LogResult)
        data = base64.b64decode(result.data_b64)
    except CairnError as exc:
        return LogChunk(site, role, rank, b"", offset, error=str(exc)), True
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        return LogChunk(site, role, rank, b"", offset, error=f"bad answer: {exc}"), True
    next_offset = result.offset if result.offset else offset + len(data)
    return LogChunk(site, role, rank, data, next_offset), result.done
