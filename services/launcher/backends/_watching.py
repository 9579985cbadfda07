"""What the backends that watch their workers from the launcher share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from cairn.errors import InvalidInput
from cairn.launcher.backends.base import LaunchHandle, WorkerExit


class Watching(Protocol):
    name: str
    _watches: dict[str, Any]
    _ended: dict[str, WorkerExit]

    async def reattach(self, handle: LaunchHandle) -> LaunchHandle | WorkerExit: ...


async def find_watch(backend: Watching, handle: LaunchHandle) -> Any:
    """The watch of a worker (found again first, when this launcher did not start it), or
    how it ended (a `WorkerExit`)."""
    ended = backend._ended.get(handle.launch_id)
    if ended is not None:
        return ended
    if handle.launch_id not in backend._watches:
        found = await backend.reattach(handle)
        if isinstance(found, WorkerExit):
            return found
    return backend._watches[handle.launch_id]


def already_known(backend: Watching, handle: LaunchHandle) -> LaunchHandle | WorkerExit | None:
    """What a reattach knows before asking the platform: how the worker ended, or the handle
    while this launcher watches it; None when the platform must be asked.

    Raises:
        InvalidInput: the handle is another backend's.
    """
    if handle.backend != backend.name:
        raise InvalidInput(f"handle is for backend {handle.backend!r}, not {backend.name!r}",
                           field="backend")
    ended = backend._ended.get(handle.launch_id)
    if ended is not None:
        return ended
    if handle.launch_id in backend._watches:
        return handle
    return None


async def wait_stopped(done: asyncio.Future[Any], limit_s: float) -> None:
    """Wait, bounded, for a stopped worker's watch to see it end (shielded: giving up the
    wait never stops the watch)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(done), limit_s)


async def wait_changed(changed: asyncio.Event, timeout_s: float) -> None:
    """Wait until `changed` is set or `timeout_s` passed, whichever comes first.

    `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` returns normally when the
    task is cancelled in the same loop turn as the event is set, so a watch loop stopped just
    as its pod changed would swallow the cancel and never end (and `close()` would hang on
    it).
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await changed.wait()


async def stop_watching(watches: dict[str, Any]) -> None:
    """Cancel every watch task and forget them (the workers themselves keep running)."""
    tasks = [w.task for w in watches.values() if w.task is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    watches.clear()


async def stream_log(read: Callable[[int], Awaitable[bytes]], running: Callable[[], bool],
                     *, follow: bool, poll_s: float) -> AsyncIterator[bytes]:
    """A worker's output from byte `offset` on, `read(offset)` at a time; with `follow`, until
    the worker ends."""
    offset = 0
    while True:
        # Looked at before reading, so the last output after the end is still drained.
        alive = running()
        chunk = await read(offset)
        if chunk:
            offset += len(chunk)
            yield chunk
        elif follow and alive:
            await asyncio.sleep(max(poll_s, 0.2))
        else:
            return


async def wait_watched(backend: Watching, handle: LaunchHandle) -> WorkerExit:
    """How a worker ended, waiting for its watch (bounded by the worker's timeout)."""
    watch = await find_watch(backend, handle)
    if isinstance(watch, WorkerExit):
        return watch
    assert watch.task is not None
    # Shielded: a caller that stops waiting must not stop the watch.
    ended: WorkerExit = await asyncio.shield(watch.task)
    return ended
