"""Events the worker SDK writes, on `cairn.study.<study>.job.<job>.worker.<site>.<role>.<verb>`."""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.events.workerref import OfWorker


class WorkerProgress(OfWorker, tag="worker.progress", frozen=True, kw_only=True):
    step: int | None = None
    total: int | None = None
    message: str = ""


class WorkerMetric(OfWorker, tag="worker.metric", frozen=True, kw_only=True):
    step: int | None = None
    values: dict[str, float] = {}


class ResultFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file a worker returned, stored with its job's files (`FILES_<study>`) under its
    sha256."""

    name: str
    digest: str
    size: int


class WorkerResult(OfWorker, tag="worker.result", frozen=True, kw_only=True):
    value: Any = None
    files: list[ResultFile] = []


WorkerEvent = WorkerProgress | WorkerMetric | WorkerResult
