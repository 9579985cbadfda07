"""`SyncWorker`: the worker SDK for job code that is not async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from cairn.events import WorkerResult
from cairn.worker.dataplane import Message
from cairn.worker.sdk import Worker

T = TypeVar("T")


class SyncWorker:
    """A blocking facade over `Worker` for code that is not async.

        with SyncWorker.from_env() as w:
            msg = w.receive("task", timeout=30)
            w.send("server", 0, "update", {...})

    The worker's event loop runs on a private thread; each call blocks until it is done.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="cairn-worker")

    @classmethod
    def from_env(cls) -> SyncWorker:
        return cls(Worker.from_env())

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def __enter__(self) -> SyncWorker:
        self._thread.start()
        self._run(self.worker.connect())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._run(self.worker.close(), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def __getattr__(self, name: str) -> Any:
        # Identity and params straight from the worker (study, job, site, role, rank, ...).
        return getattr(self.worker, name)

    def progress(self, step: int | None = None, total: int | None = None,
                 message: str = "") -> None:
        self._run(self.worker.progress(step, total, message))

    def metric(self, step: int | None = None, **values: float) -> None:
        self._run(self.worker.metric(step, **values))

    def result(self, value: Any = None, files: Iterable[str | Path] = ()) -> WorkerResult:
        return self._run(self.worker.result(value, files))

    def send(self, role: str, rank: int, topic: str, payload: Any) -> str:
        return self._run(self.worker.send(role, rank, topic, payload))

    def broadcast(self, topic: str, payload: Any) -> str:
        return self._run(self.worker.broadcast(topic, payload))

    def receive(self, topic: str, timeout: float = 60.0) -> Message:
        return self._run(self.worker.receive(topic, timeout))

    def poll(self, topic: str) -> Message | None:
        return self._run(self.worker.poll(topic))

    def watch_job(self, timeout: float = 10.0) -> None:
        self._run(self.worker.watch_job(timeout))

    def request(self, role: str, rank: int, topic: str, payload: Any,
                timeout: float = 60.0) -> Message:
        return self._run(self.worker.request(role, rank, topic, payload, timeout))
