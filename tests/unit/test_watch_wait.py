"""A watch loop's wait for a change: a stop that arrives with the change still stops it.

The Kubernetes backend's pod loop waits for a watch event or its poll interval; `close()`
cancels the loop and waits for it. On Python 3.11 an `asyncio.wait_for` whose inner wait
finishes in the same loop turn as the cancel returns normally, so the loop went round again
and `close()` hung (the restarted-backend test, on a loaded machine).
"""

from __future__ import annotations

import asyncio

import pytest

from cairn.launcher.backends._watching import stop_watching, wait_changed


class _Watch:
    def __init__(self, task: asyncio.Task[None]) -> None:
        self.task = task


async def test_a_cancel_that_comes_with_the_change_ends_the_loop() -> None:
    changed = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            changed.clear()
            await wait_changed(changed, 30.0)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)  # the loop now waits inside wait_changed
    assert rounds == 1
    # The pod changes and the launcher closes in one loop turn: the event's waiter is woken
    # first, then the cancel lands.
    changed.set()
    watches = {"w": _Watch(task)}
    async with asyncio.timeout(5.0):  # stop_watching runs (and cancels) before any yield
        await stop_watching(watches)
    assert task.cancelled()
    assert rounds == 1


async def test_the_wait_ends_at_its_bound_or_at_the_change() -> None:
    changed = asyncio.Event()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await wait_changed(changed, 0.05)
    assert loop.time() - t0 >= 0.05
    changed.set()
    await asyncio.wait_for(wait_changed(changed, 30.0), 1.0)


@pytest.mark.parametrize("bound", [0.0, -1.0])
async def test_a_bound_already_past_returns_at_once(bound: float) -> None:
    await asyncio.wait_for(wait_changed(asyncio.Event(), bound), 1.0)
