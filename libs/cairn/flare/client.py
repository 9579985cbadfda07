"""FLARE's Client API (`import nvflare.client as flare`) over Cairn's federated rounds.

    flare.init()
    while flare.is_running():
        model = flare.receive()          # FLModel: params, current_round (from 0), ...
        ...
        flare.send(flare.FLModel(params=new, params_type=flare.ParamsType.DIFF,
                                 metrics={"accuracy": a}, meta={"NUM_STEPS_CURRENT_ROUND": n}))

A trainer is a client of `cairn.worker.rounds`: `init` says `ready` to the server role,
`receive` is the round's `task`, `send` its `update`. A DIFF update is added to the model
it answers before it is sent, so Cairn's FedAvg (weighted by `NUM_STEPS_CURRENT_ROUND`, 1
where the trainer gives none, as FLARE weighs) aggregates FULL and DIFF trainers alike:
the weighted mean of `global + diff_i` is `global` plus the weighted mean of the diffs,
which is FLARE's DIFF aggregation. Metrics are published with the update (`worker.metric`).

`is_running()` blocks until the next round's task or the end of training (the server's
`stop`, or the server role's exit), as FLARE's does; `receive()` returns None once training
is over.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from cairn.errors import CairnError, Timeout
from cairn.flare.model import FLModel, MetaKey, ParamsType, params_type_of
from cairn.worker.dataplane import Message
from cairn.worker.sdk import Worker, WorkerEnvError
from cairn.worker.sync import SyncWorker

PARAMS_FORMATS = ("numpy", "pytorch")
WAIT_SLICE_S = 0.2  # how often a waiting trainer looks whether the server role exited


class FlareAPIError(CairnError):
    """The trainer used the Client API out of order (send before receive, no init, ...)."""


class ClientSession:
    """One trainer's Client API session: its worker, the task it answers, the round count."""

    def __init__(self, worker: SyncWorker) -> None:
        self.worker = worker
        self.server = str(worker.params.get("server_role", "server"))
        self.idle_s = float(worker.params.get("client_timeout", 600.0))
        self.total_rounds = int(worker.params.get("rounds", 1))
        self.params_format = str(worker.params.get("params_format", "numpy"))
        """What `receive()` hands the trainer: numpy arrays, or (`pytorch`, as FLARE's
        PyTorch executors exchange them) CPU tensors over the same memory, so a PyTorch
        trainer's `net.load_state_dict(model.params)` runs unchanged."""
        if self.params_format not in PARAMS_FORMATS:
            raise FlareAPIError(f"params_format is {self.params_format!r}: one of "
                                f"{', '.join(PARAMS_FORMATS)}")
        self.running = True
        self._pending: dict[str, Any] | None = None
        self._current: dict[str, Any] | None = None
        self._received_at = 0.0
        self.rounds_sent = 0

    def start(self) -> None:
        self.worker.watch_job()
        self.worker.send(self.server, 0, "ready", {"site": self.worker.site})

    # -- tasks ----------------------------------------------------------------------------

    def _wait_task(self) -> Message | None:
        deadline = time.monotonic() + self.idle_s
        while True:
            if (self.server, 0) in self.worker.exited:
                return self.worker.poll("task")  # a stop sent just before it ended, or None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Timeout(f"no task from {self.server}/0 within {self.idle_s:g}s "
                              "(params client_timeout)")
            try:
                return self.worker.receive("task", min(remaining, WAIT_SLICE_S))
            except Timeout:
                continue

    def _next(self) -> None:
        msg = self._wait_task()
        # A trainer that started late (or again) catches up with the latest task only.
        while msg is not None and (newer := self.worker.poll("task")) is not None:
            msg = newer
        if msg is None or msg.payload.get("stop"):
            self.running = False
            return
        self._pending = msg.payload

    def is_running(self) -> bool:
        if self._pending is None and self.running:
            self._next()
        return self._pending is not None

    def receive(self) -> FLModel | None:
        if not self.is_running():
            return None
        task, self._pending = self._pending, None
        assert task is not None
        self._current = task
        self._received_at = time.perf_counter()
        rnd = int(task["round"])
        model = task.get("model")
        params = dict(model) if isinstance(model, dict) else {}
        if self.params_format == "pytorch":
            from cairn.worker.torch import tensors

            # Copies: a trainer may change its tensors in place, and a DIFF is added to the
            # model as received.
            params = tensors({k: np.array(v) for k, v in params.items()})
        return FLModel(params_type=ParamsType.FULL, params=params,
                       current_round=rnd - 1, total_rounds=self.total_rounds,
                       meta={MetaKey.JOB_ID: self.worker.job,
                             MetaKey.SITE_NAME: self.worker.site})

    def send(self, model: FLModel) -> None:
        if self._current is None:
            raise FlareAPIError("flare.send() before flare.receive(): there is no round to "
                                "answer")
        if not isinstance(model, FLModel):
            raise FlareAPIError(f"flare.send() takes an FLModel, not {type(model).__name__}")
        task, self._current = self._current, None
        compute_s = time.perf_counter() - self._received_at
        weights = full_params(model, task.get("model"))
        n = float(model.meta.get(MetaKey.NUM_STEPS_CURRENT_ROUND, 1.0))
        if n <= 0:
            raise FlareAPIError(f"meta NUM_STEPS_CURRENT_ROUND is {n:g}: it weighs the update "
                                "and must be positive")
        metrics = numeric_metrics(model.metrics)
        rnd = int(task["round"])
        self.worker.send(self.server, 0, "update", {
            "round": rnd, "weights": weights, "n": n, "compute_s": compute_s,
            "metrics": metrics, "params_type": params_type_of(model).value})
        self.worker.metric(rnd, compute_s=compute_s, n_samples=n, **metrics)
        self.rounds_sent += 1

    def system_info(self) -> dict[str, Any]:
        return {"site_name": self.worker.site, "job_id": self.worker.job}


def _arrays(params: dict[str, Any]) -> dict[str, Any]:
    # Torch tensors (a state_dict) cross as numpy arrays: the data plane never pickles.
    out = {}
    for key, value in params.items():
        if hasattr(value, "detach") and hasattr(value, "cpu"):
            value = value.detach().cpu().numpy()
        out[str(key)] = value
    return out


def full_params(model: FLModel, received: Any) -> dict[str, Any]:
    """The model's params as a whole model: DIFF params added to the received model.

    A parameter the received model lacks (a first round that got no initial model) is
    taken as the change from zero; a parameter the DIFF leaves out keeps its received value.

    Raises:
        FlareAPIError: no params.
    """
    if not model.params:
        raise FlareAPIError("flare.send(): FLModel.params is empty; a training round answers "
                            "with the model (params_type FULL) or its change (DIFF)")
    params = _arrays(model.params)
    if params_type_of(model) is ParamsType.FULL:
        return params
    base = dict(received) if isinstance(received, dict) else {}
    merged = {key: base[key] + params[key] if key in params else base[key] for key in base}
    merged.update({key: value for key, value in params.items() if key not in base})
    return merged


def numeric_metrics(metrics: dict[str, Any] | None) -> dict[str, float]:
    """The metrics that are numbers (what Cairn's metric events carry)."""
    out: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        try:
            out[str(key)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


# -- the module-level API FLARE's trainers call ------------------------------------------

_session: list[ClientSession] = []


def init(rank: int | str | None = None, config_file: str | None = None,
         **_ignored: Any) -> None:
    """Join the job as its trainer (connect, say `ready` to the server). Idempotent.

    Raises:
        FlareAPIError: not inside a Cairn worker.
    """
    if _session:
        return
    try:
        sync = SyncWorker(Worker.from_env())
    except WorkerEnvError as exc:
        raise FlareAPIError(f"nvflare.client on Cairn runs only inside a Cairn worker: {exc}"
                            ) from None
    sync.__enter__()
    session = ClientSession(sync)
    session.start()
    _session.append(session)


def _current() -> ClientSession:
    if not _session:
        raise FlareAPIError("call flare.init() first")
    return _session[0]


def is_running() -> bool:
    return _current().is_running()


def receive(timeout: float | None = None) -> FLModel | None:
    return _current().receive()


def send(model: FLModel, clear_cache: bool = True) -> None:
    _current().send(model)


def system_info() -> dict[str, Any]:
    return _current().system_info()


def get_site_name() -> str:
    return _current().worker.site  # type: ignore[no-any-return]


def get_job_id() -> str:
    return _current().worker.job  # type: ignore[no-any-return]


def get_config() -> dict[str, Any]:
    """The job's params (FLARE's client config is the job's, here its `params`)."""
    return dict(_current().worker.params)


def get_task_name() -> str:
    return "train"


def is_train() -> bool:
    return True


def is_evaluate() -> bool:
    return False


def is_submit_model() -> bool:
    return False


def log(key: str, value: Any, data_type: Any = None, **kwargs: Any) -> None:
    """A number is published as a worker metric at `global_step` (else the round)."""
    session = _current()
    step = kwargs.get("global_step")
    try:
        number = float(value)
    except (TypeError, ValueError):
        return
    session.worker.metric(int(step) if step is not None else session.rounds_sent,
                          **{str(key): number})


def clear() -> None:
    """Nothing is cached between rounds here."""


def shutdown() -> None:
    """Leave the job: close the worker's connection (the runner does it at exit too)."""
    if _session:
        session = _session.pop()
        session.worker.__exit__(None, None, None)
