"""The workflow library: federated strategies a job names in its spec (docs/workflows.md).

    workflow: {name: fedprox, params: {mu: 0.01}}        # job.yaml

    from cairn.worker.workflows import make_workflow, FedAdam
    await run_server(w, initial=model, workflow=FedAdam())   # or chosen by the job's spec

| name | server | client |
|---|---|---|
| fedavg | mean weighted by samples | - |
| fedprox | as fedavg | proximal term `ctx.mu` |
| fedadam, fedyogi, fedadagrad, fedavgm | optimiser step on the averaged delta | - |
| scaffold | model and control variate | correction `ctx.correction` |
| cyclic | the sites in turn | - |
| median, trimmed-mean | robust per-coordinate statistics | - |

Cross-site evaluation is not a strategy but a last step any of them may add
(`cross_site_eval: true`, `cairn.worker.workflows.crosssite`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cairn.errors import InvalidInput
from cairn.events.workflow import WorkflowRequest
from cairn.spec.workflow import WORKFLOWS, workflow_params
from cairn.worker.workflows.averaging import FedAvg, FedProx, Median, TrimmedMean
from cairn.worker.workflows.base import ClientRound, ClientState, Update, Workflow
from cairn.worker.workflows.cyclic import Cyclic
from cairn.worker.workflows.fedopt import FedAdagrad, FedAdam, FedAvgM, FedYogi
from cairn.worker.workflows.scaffold import Scaffold

_MAKERS: dict[str, Callable[[Any], Workflow]] = {
    "fedavg": lambda p: FedAvg(),
    "fedprox": FedProx,
    "fedadam": FedAdam,
    "fedyogi": FedYogi,
    "fedadagrad": FedAdagrad,
    "fedavgm": FedAvgM,
    "scaffold": Scaffold,
    "cyclic": Cyclic,
    "median": lambda p: Median(),
    "trimmed-mean": TrimmedMean,
}
assert _MAKERS.keys() == WORKFLOWS.keys()  # one list of names: the spec's


def make_workflow(name: str, params: dict[str, Any] | None = None) -> Workflow:
    """The workflow called `name` with `params` (the job spec's `workflow.params`).

    Raises:
        InvalidInput: an unknown name or parameter.
    """
    if name not in _MAKERS:
        raise InvalidInput(f"unknown workflow {name!r} (known: {', '.join(_MAKERS)})",
                           field="workflow.name")
    try:
        typed = workflow_params(name, dict(params or {}))
    except Exception as exc:  # msgspec's ValidationError, said in the spec's words
        raise InvalidInput(f"{name}: {exc}", field="workflow.params") from None
    return _MAKERS[name](typed)


def from_request(request: WorkflowRequest | None) -> Workflow:
    """The workflow a job's spec asks for; FedAvg when it names none."""
    if request is None:
        return FedAvg()
    return make_workflow(request.name, request.params)


__all__ = [
    "ClientRound", "ClientState", "Cyclic", "FedAdagrad", "FedAdam", "FedAvg", "FedAvgM",
    "FedProx", "FedYogi", "Median", "Scaffold", "TrimmedMean", "Update", "Workflow",
    "from_request", "make_workflow",
]
