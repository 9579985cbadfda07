"""Federated rounds: the common shape of an FL job, so the job itself is a page of code.

    # server role                                  # client role
    result = await run_server(w, rounds=3,         await run_client(w, train)
                              initial=model0)

The protocol, over the job's data plane (`cairn.worker.dataplane`), all of it stored in
DATA_<study>:

    ready   client -> server/0   {"site"}                       once, when the client starts
    task    server -> all        {"round", "model"} or {"stop": true}
    update  client -> server/0   {"round", "weights", "n", "compute_s", "metrics"}

The server learns its clients from `ready` (and from any update): there is no list of peers
to configure. A round ends when every known, live client answered, or at `round_timeout`;
it needs at least `min_clients` answers, else the server fails with "too few sites". A
client whose launcher reports it exited stops being waited for at once.

How a client ends: on the server's `stop` (training is over), or, should the server have
ended without one, as soon as its launcher reports the server exited. Either way
`run_client` returns and the worker exits 0 on its own, within the job's `end_grace`: the
coordinator completes the job once every worker has exited, and stops a client still
running past the grace (cause `outlived-server`).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cairn.errors import CairnError, InvalidInput, Timeout
from cairn.worker import Message, Worker

W = TypeVar("W")
Model = Any
TrainResult = tuple[Model, float] | tuple[Model, float, dict[str, float]]
Train = Callable[[Model, int], TrainResult | Awaitable[TrainResult]]
Aggregate = Callable[[list[tuple[Model, float]]], Model]
Evaluate = Callable[[Model], dict[str, float]]

WAIT_SLICE_S = 0.2  # how often a waiting server (or client) looks at exits and late `ready`s
EXIT_GRACE_S = 3.0  # how long a server that lost too many clients waits for the coordinator


class TooFewSites(CairnError):
    """Fewer clients than `min_clients` answered (the job cannot go on)."""


# -- aggregation ---------------------------------------------------------------------------

def fedavg(updates: Sequence[tuple[W, float]]) -> W:
    """Weighted federated averaging: sum of weights * n / total n.

    `weights` may be a numpy array, a number, or a dict / list / tuple of those (all updates
    with the same structure).

    Raises:
        InvalidInput: no updates, no samples, or updates of different structure.
    """
    if not updates:
        raise InvalidInput("fedavg needs at least one update")
    total = float(sum(n for _, n in updates))
    if total <= 0:
        raise InvalidInput("fedavg needs a positive number of samples")
    return _combine([w for w, _ in updates], [n / total for _, n in updates])  # type: ignore[no-any-return]


def _combine(trees: list[Any], coefs: list[float]) -> Any:
    first = trees[0]
    if isinstance(first, dict):
        if any(not isinstance(t, dict) or t.keys() != first.keys() for t in trees):
            raise InvalidInput("fedavg: updates have different keys")
        return {k: _combine([t[k] for t in trees], coefs) for k in first}
    if isinstance(first, list | tuple):
        if any(len(t) != len(first) for t in trees):
            raise InvalidInput("fedavg: updates have different lengths")
        parts = [_combine([t[i] for t in trees], coefs) for i in range(len(first))]
        return type(first)(parts)
    acc = first * coefs[0]
    for tree, coef in zip(trees[1:], coefs[1:], strict=True):
        acc = acc + tree * coef
    return acc


# -- server --------------------------------------------------------------------------------

@dataclass(frozen=True)
class RoundReport:
    """What one round did (also sent as the server's metrics for the round)."""

    round: int
    sites: list[str]
    n_samples: float
    wall_s: float
    max_compute_s: float
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def overhead_s(self) -> float:
        """Round time not spent computing: messaging, waiting, aggregating."""
        return max(0.0, self.wall_s - self.max_compute_s)


@dataclass(frozen=True)
class RoundsResult:
    model: Model
    rounds: list[RoundReport]


def _param(worker: Worker, name: str, given: Any, default: Any) -> Any:
    return given if given is not None else worker.params.get(name, default)


async def run_server(worker: Worker, *, rounds: int | None = None, initial: Model,
                     aggregate: Aggregate | None = None, evaluate: Evaluate | None = None,
                     min_clients: int | None = None, round_timeout: float | None = None,
                     ready_timeout: float | None = None) -> RoundsResult:
    """Run the rounds from the server's side; returns the final model and per-round reports.

    Defaults come from the job's params: `rounds` (3), `min_sites` (1), `round_timeout`
    (60 s), `ready_timeout` (the round timeout).

    Raises:
        TooFewSites: fewer than `min_clients` clients became ready or answered a round.
    """
    n_rounds = int(_param(worker, "rounds", rounds, 3))
    need = int(_param(worker, "min_sites", min_clients, 1))
    limit = float(_param(worker, "round_timeout", round_timeout, 60.0))
    ready_limit = float(_param(worker, "ready_timeout", ready_timeout, limit))
    combine = aggregate or fedavg
    await worker.watch_job()
    known: dict[tuple[str, int], str] = {}  # (role, rank) -> site
    # Clients deployed for this job (any role but ours): waited for at the start.
    expected = {(d.role, d.rank) for d in worker.deployments if d.role != worker.role}

    def alive() -> set[tuple[str, int]]:
        return {k for k in known if k not in worker.exited}

    deadline = time.monotonic() + ready_limit
    while True:
        missing = expected - known.keys() - worker.exited.keys()
        if len(alive()) >= need and not missing:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if len(alive()) >= need:
                break  # go on without the slow ones: they join when they are ready
            raise TooFewSites(f"too few sites: {len(alive())} of {need} clients were ready "
                              f"within {ready_limit:g}s")
        try:
            msg = await worker.receive("ready", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue
        known[(msg.sender_role, msg.sender_rank)] = msg.sender_site
    await worker.progress(0, n_rounds, f"{len(alive())} clients ready")

    model, reports = initial, []
    for rnd in range(1, n_rounds + 1):
        report, model = await _round(worker, rnd, model, known, alive, need, limit, combine)
        if evaluate is not None:
            report.metrics.update(await asyncio.to_thread(evaluate, model))
        reports.append(report)
        await worker.metric(rnd, round=rnd, sites=len(report.sites), wall_s=report.wall_s,
                            max_compute_s=report.max_compute_s,
                            overhead_s=report.overhead_s, **report.metrics)
        await worker.progress(rnd, n_rounds, f"round {rnd}: {len(report.sites)} sites")
    await worker.broadcast("task", {"stop": True, "round": n_rounds})
    return RoundsResult(model=model, rounds=reports)


async def _round(worker: Worker, rnd: int, model: Model, known: dict[tuple[str, int], str],
                 alive: Callable[[], set[tuple[str, int]]], need: int, limit: float,
                 combine: Aggregate) -> tuple[RoundReport, Model]:
    t0 = time.monotonic()
    await worker.broadcast("task", {"round": rnd, "model": model})
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    deadline = t0 + limit
    while True:
        while (late := await worker.poll("ready")) is not None:
            known[(late.sender_role, late.sender_rank)] = late.sender_site
        waiting = alive() - answers.keys()
        if not waiting and len(answers) >= need:
            break
        if len(alive() | answers.keys()) < need:
            dead = sorted(f"{known.get(k, '?')}" for k in known if k in worker.exited)
            # Clients died: the coordinator fails the job (cause too-few-sites) and stops
            # us. Give its verdict time to land first, so our own exit does not race it.
            await asyncio.sleep(EXIT_GRACE_S)
            raise TooFewSites(f"too few sites: round {rnd} can get at most "
                              f"{len(alive() | answers.keys())} of {need} answers "
                              f"(exited: {', '.join(dead) or 'none'})")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            msg = await worker.receive("update", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue
        key = (msg.sender_role, msg.sender_rank)
        known[key] = msg.sender_site
        if msg.payload.get("round") == rnd:
            answers[key] = msg.payload  # an answer to an older round is dropped
    if len(answers) < need:
        raise TooFewSites(f"too few sites: {len(answers)} of {need} needed answered round "
                          f"{rnd} within {limit:g}s")
    for key in set(known) - answers.keys():
        known.pop(key)  # not waited for again until it answers
    new_model = combine([(a["weights"], float(a["n"])) for a in answers.values()])
    total = sum(float(a["n"]) for a in answers.values())
    metrics: dict[str, float] = {}
    names = {k for a in answers.values() for k in (a.get("metrics") or {})}
    for name in sorted(names):
        # Clients' own metrics (e.g. local test accuracy), weighted by their samples.
        have = [a for a in answers.values() if name in (a.get("metrics") or {})]
        weight = sum(float(a["n"]) for a in have) or 1.0
        metrics[f"clients_{name}"] = sum(float(a["metrics"][name]) * float(a["n"])
                                         for a in have) / weight
    report = RoundReport(
        round=rnd, sites=sorted(known.get(k, str(k)) for k in answers), n_samples=total,
        wall_s=time.monotonic() - t0,
        max_compute_s=max(float(a.get("compute_s", 0.0)) for a in answers.values()),
        metrics=metrics)
    return report, new_model


# -- client --------------------------------------------------------------------------------

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

async def run_client(worker: Worker, train: Train, *, server_role: str | None = None,
                     idle_timeout: float | None = None) -> int:
    """Answer the server's rounds until it says stop (or has exited without saying so);
    returns how many rounds this client trained.

    `train(model, round)` returns `(weights, n_samples)` or `(weights, n_samples, metrics)`;
    a plain function runs on a thread (the bus stays responsive), a coroutine is awaited.

    Raises:
        Timeout: no task for `idle_timeout` seconds (params `client_timeout`, default 600).
    """
    server = str(_param(worker, "server_role", server_role, "server"))
    idle = float(_param(worker, "client_timeout", idle_timeout, 600.0))
    await worker.watch_job()
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
        t0 = time.perf_counter()
        if inspect.iscoroutinefunction(train):
            out = await train(task["model"], rnd)
        else:
            out = await asyncio.to_thread(train, task["model"], rnd)
            if inspect.isawaitable(out):
                out = await out
        compute_s = time.perf_counter() - t0
        weights, n = out[0], float(out[1])
        metrics = dict(out[2]) if len(out) > 2 else {}
        await worker.send(server, 0, "update", {"round": rnd, "weights": weights, "n": n,
                                                "compute_s": compute_s, "metrics": metrics})
        await worker.metric(rnd, compute_s=compute_s, n_samples=n, **metrics)
        done += 1
