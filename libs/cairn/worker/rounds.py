"""Federated rounds: the common shape of an FL job, so the job itself is a page of code.

    # server role                                  # client role
    result = await run_server(w, initial=model0)   await run_client(w, train, evaluate=score)

The workflow (FedAvg, FedProx, FedAdam, SCAFFOLD, cyclic, ...; `cairn.worker.workflows`) is
the job spec's `workflow:` unless the code passes one; the client learns it from each task.

The protocol, over the job's data plane (`cairn.worker.dataplane`), all of it stored in
DATA_<study>:

    ready   client -> server/0   {"site"}                       once, when the client starts
    task    server -> all        {"round", "model", "workflow", ...its extras} or {"stop": true}
            (cyclic: server -> the one client whose turn it is)
    update  client -> server/0   {"round", "weights", "n", "compute_s", "metrics", "extras"}
    task    server -> all        {"round", "evaluate": {name: model}}   (cross-site evaluation)
    scores  client -> server/0   {"round", "scores": {name: {metric: value}}}

The server learns its clients from `ready` (and from any update): there is no list of peers
to configure. The dropout rule: a round ends when every known, live client answered, or at
`round_timeout`; it needs at least `min_sites` answers, else the server fails with "too few
sites" (the job fails with cause too-few-sites). A client whose launcher reports it exited
stops being waited for at once; one that missed a round is not waited for again until it
answers, and a late answer to an old round is dropped.

How a client ends: on the server's `stop` (training is over), or, should the server have
ended without one, as soon as its launcher reports the server exited. Either way
`run_client` returns and the worker exits 0 on its own, within the job's `end_grace`: the
coordinator completes the job once every worker has exited, and stops a client still
running past the grace (cause `outlived-server`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cairn.errors import CairnError, InvalidInput, Timeout
from cairn.worker import Worker
from cairn.worker.clientrounds import Evaluate, Train, TrainResult, run_client
from cairn.worker.workflows import Update, Workflow, from_request
from cairn.worker.workflows.crosssite import CrossSite, cross_site_evaluation

__all__ = ["Aggregate", "CrossSite", "Evaluate", "RoundReport", "RoundsResult", "TooFewSites",
           "Train", "TrainResult", "fedavg", "run_client", "run_server"]

log = logging.getLogger("cairn.worker.rounds")
W = TypeVar("W")
Model = Any
Aggregate = Callable[[list[tuple[Model, float]]], Model]

WAIT_SLICE_S = 0.2  # how often a waiting server looks at exits and late `ready`s
EXIT_GRACE_S = 3.0  # how long a server that lost too many clients waits for the coordinator


class TooFewSites(CairnError):
    """Fewer clients than `min_sites` answered (the job cannot go on)."""
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
    """The final model, a report per round and, with cross-site evaluation, its matrix."""

    model: Model
    rounds: list[RoundReport]
    workflow: str = "fedavg"
    cross_site: CrossSite | None = None


class _Custom(Workflow):
    """A job's own `aggregate(updates)` function, as a workflow."""

    name = "custom"

    def __init__(self, combine: Aggregate) -> None:
        self.combine = combine

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        return self.combine([(u.weights, u.n) for u in updates])


@dataclass
class _Settings:
    rounds: int
    need: int
    limit: float
    ready_limit: float
    cross_site: bool


def _settings(worker: Worker, rounds: int | None, min_clients: int | None,
              round_timeout: float | None, ready_timeout: float | None,
              cross_site_eval: bool | None) -> _Settings:
    """What the code passes, else the spec's `workflow:`, else the job's params."""
    spec = worker.submitted.workflow if worker.submitted is not None else None
    role_min = None
    if worker.submitted is not None:
        role_min = next((r.min_sites for r in worker.submitted.roles
                         if r.name != worker.role and r.min_sites is not None), None)

    def pick(given: Any, written: Any, param: str, default: Any) -> Any:
        if given is not None:
            return given
        if written is not None:
            return written
        return worker.params.get(param, default)

    def written(attr: str) -> Any:
        return getattr(spec, attr) if spec is not None else None

    limit = float(pick(round_timeout, written("round_timeout_s"), "round_timeout", 60.0))
    return _Settings(
        rounds=int(pick(rounds, written("rounds"), "rounds", 3)),
        need=int(pick(min_clients, written("min_sites"), "min_sites", role_min or 1)),
        limit=limit,
        ready_limit=float(pick(ready_timeout, None, "ready_timeout", limit)),
        cross_site=bool(pick(cross_site_eval, written("cross_site_eval") or None,
                             "cross_site_eval", False)))


async def run_server(worker: Worker, *, rounds: int | None = None, initial: Model,
                     aggregate: Aggregate | None = None, evaluate: Evaluate | None = None,
                     min_clients: int | None = None, round_timeout: float | None = None,
                     ready_timeout: float | None = None, workflow: Workflow | None = None,
                     cross_site_eval: bool | None = None) -> RoundsResult:
    """Run the rounds from the server's side; returns the final model and per-round reports.

    The workflow is `workflow`, else a custom `aggregate(updates)`, else the job spec's
    `workflow:` (FedAvg when it has none). The numbers come from the arguments, else the
    spec's `workflow:` section, else the job's params: `rounds` (3), `min_sites` (the client
    role's `min_sites`, else 1), `round_timeout` (60 s), `ready_timeout` (the round timeout),
    `cross_site_eval` (false).

    Raises:
        TooFewSites: fewer than `min_sites` clients became ready or answered a round.
    """
    await worker.watch_job()
    cfg = _settings(worker, rounds, min_clients, round_timeout, ready_timeout, cross_site_eval)
    if workflow is None:
        workflow = _Custom(aggregate) if aggregate is not None else from_request(
            worker.submitted.workflow if worker.submitted is not None else None)
    known: dict[tuple[str, int], str] = {}  # (role, rank) -> site
    # Clients deployed for this job (any role but ours): waited for at the start.
    expected = {(d.role, d.rank) for d in worker.deployments if d.role != worker.role}

    def alive() -> set[tuple[str, int]]:
        return {k for k in known if k not in worker.exited}

    deadline = time.monotonic() + cfg.ready_limit
    while True:
        missing = expected - known.keys() - worker.exited.keys()
        if len(alive()) >= cfg.need and not missing:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            if len(alive()) >= cfg.need:
                break  # go on without the slow ones: they join when they are ready
            raise TooFewSites(f"too few sites: {len(alive())} of {cfg.need} clients were "
                              f"ready within {cfg.ready_limit:g}s")
        try:
            msg = await worker.receive("ready", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue
        known[(msg.sender_role, msg.sender_rank)] = msg.sender_site
    await worker.progress(0, cfg.rounds, f"{len(alive())} clients ready ({workflow.name})")

    model, reports = initial, []
    last_local: dict[str, Model] = {}  # site -> the last model it sent (cross-site evaluation)
    round_of = _cyclic_round if workflow.cyclic else _round
    for rnd in range(1, cfg.rounds + 1):
        report, model = await round_of(worker, workflow, rnd, model, known, alive, cfg,
                                       last_local)
        if evaluate is not None:
            report.metrics.update(await asyncio.to_thread(evaluate, model))
        reports.append(report)
        await worker.metric(rnd, round=rnd, sites=len(report.sites), wall_s=report.wall_s,
                            max_compute_s=report.max_compute_s,
                            overhead_s=report.overhead_s, **report.metrics)
        await worker.progress(rnd, cfg.rounds, f"round {rnd}: {len(report.sites)} sites")
    matrix = None
    if cfg.cross_site:
        await worker.progress(cfg.rounds, cfg.rounds, "cross-site evaluation")
        matrix = await cross_site_evaluation(worker, cfg.rounds + 1, model, last_local, known,
                                             alive, cfg.limit)
    await worker.broadcast("task", {"stop": True, "round": cfg.rounds})
    return RoundsResult(model=model, rounds=reports, workflow=workflow.name, cross_site=matrix)


def _task(workflow: Workflow, rnd: int, model: Model) -> dict[str, Any]:
    return {"round": rnd, "model": model, "workflow": workflow.describe(),
            **workflow.task(rnd, model)}


async def _too_few(worker: Worker, rnd: int, known: dict[tuple[str, int], str],
                   reachable: int, need: int) -> TooFewSites:
    dead = sorted(f"{known.get(k, '?')}" for k in known if k in worker.exited)
    # Clients died: the coordinator fails the job (cause too-few-sites) and stops us. Give
    # its verdict time to land first, so our own exit does not race it.
    await asyncio.sleep(EXIT_GRACE_S)
    return TooFewSites(f"too few sites: round {rnd} can get at most {reachable} of {need} "
                       f"answers (exited: {', '.join(dead) or 'none'})")


async def _round(worker: Worker, workflow: Workflow, rnd: int, model: Model,
                 known: dict[tuple[str, int], str], alive: Callable[[], set[tuple[str, int]]],
                 cfg: _Settings, last_local: dict[str, Model]) -> tuple[RoundReport, Model]:
    t0 = time.monotonic()
    workflow.known_clients(len(alive()))
    await worker.broadcast("task", _task(workflow, rnd, model))
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    dropped: list[str] = []
    deadline = t0 + cfg.limit
    while True:
        while (late := await worker.poll("ready")) is not None:
            known[(late.sender_role, late.sender_rank)] = late.sender_site
        waiting = alive() - answers.keys()
        if not waiting and len(answers) >= cfg.need:
            break
        if len(alive() | answers.keys()) < cfg.need:
            raise await _too_few(worker, rnd, known, len(alive() | answers.keys()), cfg.need)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            msg = await worker.receive("update", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue
        key = (msg.sender_role, msg.sender_rank)
        known[key] = msg.sender_site
        if _payload_round(msg.payload) != rnd:
            continue  # an answer to an older round is dropped
        if (why := _refusal(workflow, model, msg.sender_site, msg.payload)) is not None:
            # Input like any other: said in the log and the round's metrics, not a crash.
            log.warning("round %d: dropped the update of %s: %s", rnd, msg.sender_site, why)
            known.pop(key, None)  # not waited for again until it answers properly
            dropped.append(msg.sender_site)
            continue
        answers[key] = msg.payload
    if len(answers) < cfg.need:
        raise TooFewSites(f"too few sites: {len(answers)} of {cfg.need} needed answered "
                          f"round {rnd} within {cfg.limit:g}s")
    for key in set(known) - answers.keys():
        known.pop(key)  # not waited for again until it answers
    updates = [_update(known.get(k, str(k)), a) for k, a in answers.items()]
    new_model = await asyncio.to_thread(workflow.aggregate, rnd, model, updates)
    for u in updates:
        last_local[u.site] = u.weights
    report = _report(rnd, t0, updates, list(answers.values()))
    if dropped:
        report.metrics["dropped_updates"] = float(len(dropped))
    return report, new_model


def _seconds(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return max(0.0, float(value)) if ok else 0.0


def _numbers(metrics: Any) -> dict[str, float]:
    """The finite numbers of a client's metrics (anything else it sent is ignored)."""
    if not isinstance(metrics, dict):
        return {}
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}


def _payload_round(payload: Any) -> Any:
    return payload.get("round") if isinstance(payload, dict) else None


def _refusal(workflow: Workflow, model: Model, site: str, payload: Any) -> str | None:
    """Why an update cannot be aggregated, or None when it can."""
    try:
        workflow.check(model, _update(site, payload))
    except InvalidInput as exc:
        return exc.message
    return None


def _update(site: str, answer: Any) -> Update:
    try:
        return Update(site=site, weights=answer["weights"], n=float(answer["n"]),
                      extras=dict(answer.get("extras") or {}))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidInput(f"site {site} sent a malformed update ({type(exc).__name__}: "
                           f"{exc})") from None


def _report(rnd: int, t0: float, updates: list[Update],
            answers: list[dict[str, Any]]) -> RoundReport:
    metrics: dict[str, float] = {}
    sent = [(float(a["n"]), _numbers(a.get("metrics"))) for a in answers]
    for name in sorted({k for _, m in sent for k in m}):
        # Clients' own metrics (e.g. local test accuracy), weighted by their samples.
        have = [(n, m[name]) for n, m in sent if name in m]
        weight = sum(n for n, _ in have) or 1.0
        metrics[f"clients_{name}"] = sum(n * v for n, v in have) / weight
        if name == "dp_epsilon":  # the guarantee is the weakest site's
            metrics["clients_dp_epsilon_max"] = max(v for _, v in have)
    return RoundReport(
        round=rnd, sites=sorted(u.site for u in updates), n_samples=sum(u.n for u in updates),
        wall_s=time.monotonic() - t0,
        max_compute_s=max((_seconds(a.get("compute_s")) for a in answers), default=0.0),
        metrics=metrics)


async def _cyclic_round(worker: Worker, workflow: Workflow, rnd: int, model: Model,
                        known: dict[tuple[str, int], str],
                        alive: Callable[[], set[tuple[str, int]]], cfg: _Settings,
                        last_local: dict[str, Model]) -> tuple[RoundReport, Model]:
    """The model visits the live clients one at a time, in the workflow's order; a client
    that does not answer within the round timeout is skipped."""
    t0 = time.monotonic()
    while (late := await worker.poll("ready")) is not None:
        known[(late.sender_role, late.sender_rank)] = late.sender_site
    by_site = {known[k]: k for k in sorted(alive())}
    order = workflow.order(rnd, list(by_site))
    updates: list[Update] = []
    answers: list[dict[str, Any]] = []
    for site in order:
        key = by_site[site]
        await worker.send(key[0], key[1], "task", _task(workflow, rnd, model))
        answer = await _answer_of(worker, workflow, model, key, rnd, cfg.limit)
        if answer is None:
            known.pop(key, None)  # skipped: not visited again until it answers
            continue
        update = _update(site, answer)
        model = await asyncio.to_thread(workflow.aggregate, rnd, model, [update])
        last_local[site] = update.weights
        updates.append(update)
        answers.append(answer)
    if len(updates) < cfg.need:
        raise TooFewSites(f"too few sites: {len(updates)} of {cfg.need} needed trained "
                          f"round {rnd} (order: {', '.join(order) or 'no live site'})")
    report = _report(rnd, t0, updates, answers)
    # In turn, not at once: the round's compute is the sum of the visits.
    report = RoundReport(round=rnd, sites=[u.site for u in updates], n_samples=report.n_samples,
                         wall_s=report.wall_s, metrics=report.metrics,
                         max_compute_s=sum(_seconds(a.get("compute_s")) for a in answers))
    return report, model


async def _answer_of(worker: Worker, workflow: Workflow, model: Model, key: tuple[str, int],
                     rnd: int, limit: float) -> dict[str, Any] | None:
    """`key`'s update for round `rnd`, or None when it exits or the time is up; other
    clients' updates (late, for old rounds) are dropped."""
    deadline = time.monotonic() + limit
    while key not in worker.exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            msg = await worker.receive("update", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue
        if (msg.sender_role, msg.sender_rank) == key and _payload_round(msg.payload) == rnd:
            if (why := _refusal(workflow, model, msg.sender_site, msg.payload)) is not None:
                log.warning("round %d: dropped the update of %s: %s", rnd, msg.sender_site,
                            why)
                return None
            payload: dict[str, Any] = msg.payload
            return payload
    return None
