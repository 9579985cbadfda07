"""Reading a worker's captured log from its site's launcher (request/reply, not stored).

Request on `cairn.api.site.<site>.logs`: `{"launch_id", "offset", "max_bytes"}`.
Reply: `{"ok": true, "result": {"data_b64", "offset", "done"}}` where `offset` is where the
next read starts and `done` means the worker exited and everything was read.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NamedTuple

import msgspec

from cairn import subjects
from cairn.api import REPLY_DECODER
from cairn.bus import Bus
from cairn.errors import CairnError, Timeout, from_dict
from cairn.state.job import JobState


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


async def worker_logs(
    bus: Bus,
    fetch_job: Callable[[], Awaitable[JobState]],
    *,
    site: str | None = None,
    follow: bool = False,
    poll: float = 0.5,
    max_bytes: int = 256 * 1024,
    limit_s: float | None = None,
    request_timeout: float = 10.0,
) -> AsyncIterator[LogChunk]:
    """Every worker's log of one job (`fetch_job` gives its current state); see `Client.logs`."""
    offsets: dict[str, int] = {}
    done: set[str] = set()
    deadline = None if limit_s is None else time.monotonic() + limit_s
    while True:
        job = await fetch_job()
        progressed = False
        for key, w in sorted(job.workers.items()):
            if (site and w.site != site) or not w.launch_id or key in done:
                continue
            offset = offsets.get(key, 0)
            for _ in range(10_000):  # a bound: 10k chunks of max_bytes each is plenty
                chunk, finished = await read_log_chunk(
                    bus,
                    w.site,
                    w.role,
                    w.rank,
                    w.launch_id,
                    offset,
                    max_bytes,
                    request_timeout=request_timeout,
                )
                if chunk.data or chunk.error:
                    progressed = True
                    yield chunk
                offset = offsets[key] = chunk.offset
                if finished or chunk.error:
                    done.add(key)
                if finished or chunk.error or not chunk.data:
                    break
        if not follow:
            return
        # Workers that never got a launch id (rejected, or lost before launching) have no
        # log; waiting for them would never end.
        pending = [
            k
            for k, w in job.workers.items()
            if (not site or w.site == site) and k not in done and (w.launch_id or not job.terminal)
        ]
        if job.terminal and not pending:
            return
        if deadline is not None and time.monotonic() >= deadline:
            raise Timeout(f"logs of {job.job}: still following after {limit_s:g}s")
        if not progressed:
            await asyncio.sleep(poll)
