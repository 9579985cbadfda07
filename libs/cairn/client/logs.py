"""Reading a worker's captured log from its site's launcher (request/reply, not stored).

Request: `cairn.api.LogRead` on `cairn.api.site.<site>.logs`, in an envelope that names the
job's study and, in a secure federation, is signed like every request (the launcher answers
only those whose study the job is in); result: `cairn.api.LogData`, where `offset` is where
the next read starts and `done` means the worker exited and everything was read.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import NamedTuple, Protocol

from cairn import api, subjects
from cairn.errors import CairnError, Timeout
from cairn.state.job import JobState


class Call(Protocol):
    """How a request is sent: `Client.call` (signed in a secure federation)."""

    def __call__(self, subject: str, request: api.Request, *,
                 study: str | None = None) -> Awaitable[api.Result]: ...


class LogChunk(NamedTuple):
    """Bytes of one worker's log; `error` says why a site's log could not be read."""

    site: str
    role: str
    rank: int
    data: bytes
    offset: int
    error: str | None = None




async def read_log_chunk(
    call: Call,
    study: str | None,
    site: str,
    role: str,
    rank: int,
    launch_id: str,
    offset: int,
    max_bytes: int,
) -> tuple[LogChunk, bool]:
    """One read of a worker of a job of `study`; returns the chunk and whether the log is
    finished.

    A launcher that does not answer, or answers with an error (a refusal too), gives a chunk
    with `error` set, so one unreachable site does not hide the logs of the others.
    """
    request = api.LogRead(launch_id=launch_id, offset=offset, max_bytes=max_bytes)
    try:
        result = await call(subjects.site_logs(site), request, study=study)
        if not isinstance(result, api.LogData):
            raise TypeError(f"a {type(result).__name__} result")
        data = base64.b64decode(result.data_b64)
    except CairnError as exc:
        return LogChunk(site, role, rank, b"", offset, error=str(exc)), True
    except (TypeError, ValueError) as exc:
        return LogChunk(site, role, rank, b"", offset, error=f"bad answer: {exc}"), True
    next_offset = result.offset if result.offset else offset + len(data)
    return LogChunk(site, role, rank, data, next_offset), result.done


async def worker_logs(
    call: Call,
    fetch_job: Callable[[], Awaitable[JobState]],
    *,
    site: str | None = None,
    follow: bool = False,
    poll: float = 0.5,
    max_bytes: int = 256 * 1024,
    limit_s: float | None = None,
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
                    call,
                    job.study or None,
                    w.site,
                    w.role,
                    w.rank,
                    w.launch_id,
                    offset,
                    max_bytes,
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
