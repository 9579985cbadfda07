"""A worker the backend started is watched to its end even when recording it fails for a
while (a cluster electing the bucket's leader): a redelivered launch request is never a
second launch, so a record that failed once used to leave the worker unwatched and its job
waiting forever for its end."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cairn.errors import Unavailable
from cairn.launcher import started


class FakeBus:
    def __init__(self) -> None:
        self.published: list[object] = []

    async def publish(self, event: object) -> int:
        self.published.append(event)
        return len(self.published)


class Launcher:
    """The parts of a launcher `started` uses; its record store fails `silent` times."""

    backend = SimpleNamespace(name="process")  # no `started`: workers run at once

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.bus = FakeBus()
        self.watched: list[tuple[object, object]] = []
        self.recorded: list[object] = []

    async def record(self, event: object, *, handle: object = None) -> object:
        if self.silent:
            self.silent -= 1
            raise Unavailable("put in launches_site-a: NATS did not answer")
        self.recorded.append(handle)
        return SimpleNamespace(launch_id="l1")

    def watch(self, launch: object, handle: object, running: object = None) -> None:
        self.watched.append((launch, handle))


async def test_a_started_worker_is_recorded_reported_and_watched_once_the_bus_answers() -> None:
    svc: Any = Launcher(silent=2)
    handle, running = object(), SimpleNamespace(launch_id="l1")
    await started.running_later(svc, SimpleNamespace(), running, handle)  # type: ignore[arg-type]
    assert svc.recorded == [handle]
    assert svc.bus.published == [running]
    assert [h for _, h in svc.watched] == [handle]


async def test_a_worker_whose_record_never_goes_through_is_still_watched(monkeypatch: Any) -> None:
    monkeypatch.setattr(started, "ATTEMPTS", 3)
    svc: Any = Launcher(silent=10**6)
    svc.launches = SimpleNamespace(get=lambda launch_id: SimpleNamespace(launch_id=launch_id))
    handle = object()
    await started.running_later(svc, SimpleNamespace(), SimpleNamespace(launch_id="l1"), handle)  # type: ignore[arg-type]
    assert [h for _, h in svc.watched] == [handle], "its end is still reported"
