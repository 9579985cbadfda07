"""The client's side of federated rounds (`run_client`; the protocol is in `rounds`).

Each round a client builds its workflow's context from the task (FedProx's `mu`, SCAFFOLD's
correction), runs the job's `train`, adds what its workflow sends besides the model, and
passes everything through the privacy filters its site enforces before it leaves.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cairn.errors import InvalidInput, Timeout
from cairn.events.workflow import PrivacyRule
from cairn.worker import Message, Worker
from cairn.worker.privacy import PrivacyFilter
from cairn.worker.workflows import ClientRound, ClientState, make_workflow
from cairn.worker.workflows.crosssite import answer_evaluation

Model = Any
TrainResult = tuple[Model, float] | tuple[Model, float, dict[str, float]]
Train = Callable[..., TrainResult | Awaitable[TrainResult]]
"""`train(model, round)` or `train(model, round, ctx)` with `ctx` a `ClientRound`."""
Evaluate = Callable[[Model], dict[str, float]]

WAIT_SLICE_S = 0.2  # how often a waiting client looks at the server's exit


async def _next_task(worker: Worker, server: tuple[str, int], idle: float) -> Message | None:
    """The next task; None once the server has exited and left none.

    Raises:
        Timeout: nothing within `idle` seconds while the server runs.
    """
    deadline = time.monotonic() + idle
    while True:
        remaining = deadline - time.monotonic()
        if server in worker.exited:
            return await worker.poll("task")  # a stop sent just before it ended, or None
        if remaining <= 0:
            raise Timeout(f"no task from {server[0]}/{server[1]} within {idle:g}s")
        try:
            return await worker.receive("task", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue


def privacy_in_force(worker: Worker) -> PrivacyRule | None:
    """The filters this worker applies: what its site's agent accepted it with (the site's
    rule merged with the job's), else the job's own (no agent said otherwise)."""
    if worker.accepted is not None:
        return worker.accepted.privacy
    spec = worker.submitted.workflow if worker.submitted is not None else None
    return spec.privacy if spec is not None else None


def _takes_context(train: Train) -> bool:
    try:
        params = inspect.signature(train).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params)


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A coroutine function is awaited; a plain one runs on a thread (the bus stays live)."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    out = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(out):
        out = await out
    return out


class ClientSide:
    """One client's workflow state and privacy filters, kept across rounds; the part of
    `run_client` that is not messaging (a test or a notebook can drive it directly)."""

    def __init__(self, rule: PrivacyRule | None) -> None:
        self.filter = PrivacyFilter(rule) if rule is not None else None
        self.state: ClientState = ClientState()
        self.key: tuple[str, str] | None = None
        self.local: Model = None  # the last trained model (its excluded parameters stay)

    def prepare(self, task: dict[str, Any]) -> tuple[ClientRound, Model]:
        """The round's context and the model to train from."""
        described = task.get("workflow") or {}
        name = str(described.get("name", "fedavg"))
        params = dict(described.get("params") or {})
        key = (name, repr(sorted(params.items())))
        if key != self.key:
            try:
                self.state = make_workflow(name, params).client()
            except InvalidInput:
                self.state = ClientState()  # a server's own aggregation: nothing to add
            self.key = key
        received = task["model"]
        ctx = self.state.round(int(task["round"]), task, received, name)
        start = received
        if self.filter is not None and self.local is not None:
            start = self.filter.keep_local(received, self.local)
        return ctx, start

    def finish(self, ctx: ClientRound, out: TrainResult) -> dict[str, Any]:
        """The update to send for what `train` returned, filtered."""
        weights, n = out[0], float(out[1])
        metrics = {k: float(v) for k, v in (out[2] if len(out) > 2 else {}).items()}
        extras = self.state.extras(ctx, weights)
        self.local = weights
        if self.filter is not None:
            weights, report = self.filter.update(weights, ctx.global_model)
            if "control_delta" in extras:
                extras["control_delta"], more = self.filter.extra(extras["control_delta"])
                report.update({k: v for k, v in more.items() if k == "dp_epsilon"})
            metrics.update(report)
        return {"round": ctx.round, "weights": weights, "n": n, "metrics": metrics,
                "extras": extras}


async def run_client(worker: Worker, train: Train, *, server_role: str | None = None,
                     idle_timeout: float | None = None,
                     evaluate: Evaluate | None = None) -> int:
    """Answer the server's rounds until it says stop (or has exited without saying so);
    returns how many rounds this client trained.

    `train(model, round)` (or `train(model, round, ctx)`, `ctx` a `ClientRound`: FedProx's
    `ctx.mu`, SCAFFOLD's `ctx.correction`) returns `(weights, n_samples)` or `(weights,
    n_samples, metrics)`; a plain function runs on a thread (the bus stays responsive), a
    coroutine is awaited. `evaluate(model)` returns metrics of a model on this site's data,
    for cross-site evaluation. What leaves the site passes its privacy filters first.

    Raises:
        Timeout: no task for `idle_timeout` seconds (params `client_timeout`, default 600).
    """
    server = str(server_role if server_role is not None
                 else worker.params.get("server_role", "server"))
    idle = float(idle_timeout if idle_timeout is not None
                 else worker.params.get("client_timeout", 600.0))
    await worker.watch_job()
    side = ClientSide(privacy_in_force(worker))
    with_ctx = _takes_context(train)
    await worker.send(server, 0, "ready", {"site": worker.site})
    done = 0
    while True:
        msg = await _next_task(worker, (server, 0), idle)
        if msg is None:
            return done  # the server is gone without a stop: nothing more will come
        # A client that started late (or again) catches up with the latest task only.
        while (newer := await worker.poll("task")) is not None:
            msg = newer
        task = msg.payload
        if task.get("stop"):
            return done
        rnd = int(task["round"])
        if "evaluate" in task:
            await answer_evaluation(worker, server, rnd, task["evaluate"], evaluate)
            continue
        ctx, start = side.prepare(task)
        t0 = time.perf_counter()
        out = await (_call(train, start, rnd, ctx) if with_ctx else _call(train, start, rnd))
        compute_s = time.perf_counter() - t0
        update = side.finish(ctx, out)
        update["compute_s"] = compute_s
        await worker.send(server, 0, "update", update)
        await worker.metric(rnd, compute_s=compute_s, n_samples=update["n"],
                            **update["metrics"])
        done += 1
