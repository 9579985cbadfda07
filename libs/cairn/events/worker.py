"""Events the worker SDK writes, on `cairn.study.<study>.job.<job>.worker.<site>.<role>.<verb>`."""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.events.base import Event


class WorkerProgress(Event, tag="worker.progress", frozen=True, kw_only=True):
    job: str
    site: str
    role: str
    rank: int = 0
    step: int | None = None
    total: int | None = None
    message: str = ""


class WorkerMetric(Event, tag="worker.metric", frozen=True, kw_only=True):
    job: str
    site: str
    role: str
    rank: int = 0
    step: int | None = None
    values: dict[str, float] = {}


class ResultFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file a worker returned, stored with its job's files (`FILES_<study>`) under its
    sha256."""

    name: str
    digest: str
    size: int


class WorkerResult(Event, tag="worker.result", frozen=True, kw_only=True):
    job: str
    site: str
    role: str
    rank: int = 0
    value: Any = None
    files: list[ResultFile] = []


WorkerEvent = WorkerProgress | WorkerMetric | WorkerResult
