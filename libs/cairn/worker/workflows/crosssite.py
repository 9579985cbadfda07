"""Cross-site evaluation: every site scores every site's model and the global one.

After the last round the server sends each live client the global model and the last model
each site sent (after that site's privacy filters: nothing that had not already left a site
is shown to another); each client runs the job's `evaluate(model)` on its own data for every
one and sends the scores back. The result is a matrix, rows the evaluating sites, columns the
models (`global` and one per site):

    {"models": ["global", "site-a", "site-b"],
     "scores": {"site-a": {"global": {"accuracy": 0.93}, "site-a": {...}, "site-b": {...}},
                "site-b": {...}},
     "missing": {"site-c": "no answer within 60s"}}

A site that does not answer within the round timeout, or whose client has no `evaluate`,
is listed under `missing` with the reason; it does not fail the job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cairn.errors import Timeout
from cairn.worker import Worker

log = logging.getLogger("cairn.worker.crosssite")
GLOBAL = "global"
WAIT_SLICE_S = 0.2


@dataclass(frozen=True)
class CrossSite:
    """The cross-site evaluation matrix (see the module docstring)."""

    models: list[str]
    scores: dict[str, dict[str, dict[str, float]]]
    missing: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"models": self.models, "scores": self.scores, "missing": self.missing}


def _model_names(last_local: dict[str, Any]) -> dict[str, str]:
    """Site -> its column name (`global` is the server's; a site of that name is renamed)."""
    return {site: f"{site} (site)" if site == GLOBAL else site for site in sorted(last_local)}


async def cross_site_evaluation(worker: Worker, rnd: int, model: Any,
                                last_local: dict[str, Any], known: dict[tuple[str, int], str],
                                alive: Callable[[], set[tuple[str, int]]],
                                limit: float) -> CrossSite:
    """Ask every live client to score every model; the matrix of what came back in time."""
    columns = _model_names(last_local)
    models = {GLOBAL: model, **{columns[s]: last_local[s] for s in columns}}
    await worker.broadcast("task", {"round": rnd, "evaluate": models})
    asked = {known[k]: k for k in alive() if k in known}
    scores: dict[str, dict[str, dict[str, float]]] = {}
    missing: dict[str, str] = {}
    deadline = time.monotonic() + limit
    while len(scores) + len(missing) < len(asked):
        for site, key in asked.items():
            if key in worker.exited and site not in scores:
                missing.setdefault(site, "its worker exited")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            msg = await worker.receive("scores", min(remaining, WAIT_SLICE_S))
        except Timeout:
            continue
        payload = msg.payload
        if not isinstance(payload, dict) or payload.get("round") != rnd \
                or msg.sender_site not in asked:
            continue
        if error := payload.get("error"):
            missing[msg.sender_site] = str(error)[:500]
            continue
        try:
            scores[msg.sender_site] = {
                str(name): {str(k): float(v) for k, v in (metrics or {}).items()}
                for name, metrics in (payload.get("scores") or {}).items()}
        except (AttributeError, TypeError, ValueError) as exc:
            missing[msg.sender_site] = f"sent scores that are not numbers by model ({exc})"
    for site in asked:
        if site not in scores:
            missing.setdefault(site, f"no answer within {limit:g}s")
    return CrossSite(models=list(models), scores=dict(sorted(scores.items())),
                     missing=dict(sorted(missing.items())))


async def answer_evaluation(worker: Worker, server: str, rnd: int, models: dict[str, Any],
                            evaluate: Callable[[Any], dict[str, float]] | None) -> None:
    """The client's part: score each model with the job's `evaluate`, send the scores."""
    if evaluate is None:
        await worker.send(server, 0, "scores", {
            "round": rnd, "error": "the client has no evaluate function "
            "(run_client(w, train, evaluate=...))"})
        return
    scores: dict[str, dict[str, float]] = {}
    for name, candidate in models.items():
        try:
            metrics = await asyncio.to_thread(evaluate, candidate)
            scores[name] = {str(k): float(v) for k, v in metrics.items()}
        except Exception as exc:  # the job's own code: its failure is its row's reason
            log.exception("evaluate failed on model %s", name)
            await worker.send(server, 0, "scores", {
                "round": rnd, "error": f"evaluate failed on model {name}: "
                f"{type(exc).__name__}: {exc}"})
            return
    await worker.send(server, 0, "scores", {"round": rnd, "scores": scores})
