"""The shape every workflow has: what the server sends, how it combines the answers, and
what a client adds to its answer.

    server: task extras -> clients train -> aggregate(updates) -> next global model
    client: ClientRound (the global model, FedProx's mu, SCAFFOLD's correction, ...) ->
            the job's train() -> extras for the update (SCAFFOLD's control delta)

A workflow object holds the server's state across rounds (FedOpt's moments, SCAFFOLD's
control variate); `client()` makes the per-client state a client keeps across rounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
import numpy as np

from cairn.errors import InvalidInput
from cairn.worker.workflows import _tree
from cairn.worker.workflows._tree import Leaves, Model


@dataclass(frozen=True)
class Update:
    """One client's answer to a round, as the server aggregates it.

    Attributes:
        site: The client's site.
        weights: The model it sent (after its site's privacy filters).
        n: Its sample count (FedAvg's weight).
        extras: What its workflow added (SCAFFOLD: `control_delta`).
    """

    site: str
    weights: Model
    n: float
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClientRound:
    """What a client's `train(model, round, ctx)` may use of its workflow, and report to it.

    Attributes:
        round: The round number (1-based).
        workflow: The workflow's name.
        global_model: The model the server sent, as received.
        mu: FedProx's proximal weight; 0 for every other workflow. Add
            `mu/2 * ||w - global||^2` to the loss (`proximal_grad` is its gradient).
        correction: SCAFFOLD's `c - c_i` (shaped like the model), to add to every gradient
            step; None for every other workflow.
        local_steps: SCAFFOLD needs it: how many gradient steps `train` took this round.
        local_lr: SCAFFOLD needs it: the learning rate of those steps.
    """

    round: int
    workflow: str
    global_model: Model
    mu: float = 0.0
    correction: Model | None = None
    local_steps: int | None = None
    local_lr: float | None = None

    def proximal_grad(self, weights: Model) -> Model:
        """mu * (w - w_global): the gradient of FedProx's proximal term at `weights`."""
        w, g = _tree.leaves(weights), _tree.leaves(self.global_model)
        return _tree.rebuild(weights, [self.mu * (a - b) for a, b in zip(w, g, strict=True)])


class ClientState:
    """A client's side of a workflow; most keep nothing."""

    def round(self, rnd: int, task: dict[str, Any], model: Model, name: str) -> ClientRound:
        return ClientRound(round=rnd, workflow=name, global_model=model)

    def extras(self, ctx: ClientRound, trained: Model) -> dict[str, Any]:
        """What the update carries besides weights and samples."""
        return {}


class Workflow:
    """A server-side strategy (see the module docstring); subclasses set `name`."""

    name: ClassVar[str]
    cyclic: ClassVar[bool] = False
    """Sites in turn, one at a time, instead of all at once (cyclic weight transfer)."""

    def task(self, rnd: int, model: Model) -> dict[str, Any]:
        """Extra fields of the round's task, beside the model."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Name and parameters, as every task carries them: a client builds its side of
        the workflow from them, whatever chose the workflow on the server."""
        params = getattr(self, "params", None)
        return {"name": self.name,
                "params": msgspec.to_builtins(params) if params is not None else {}}

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        raise NotImplementedError

    def client(self) -> ClientState:
        return ClientState()

    def order(self, rnd: int, sites: Sequence[str]) -> list[str]:
        """The order a cyclic workflow visits the sites in this round (name order here)."""
        return sorted(sites)

    def known_clients(self, count: int) -> None:
        """How many clients the server knows this round (SCAFFOLD scales by it)."""

    def check(self, model: Model, update: Update) -> None:
        """Refuse an update the server cannot aggregate: another model's names or shapes,
        a value that is not finite, a negative sample count (what a site sends is input
        like any other; the server drops such an answer and says why).

        Raises:
            InvalidInput: naming the site and what is wrong.
        """
        if not math.isfinite(update.n) or update.n < 0:
            raise InvalidInput(f"site {update.site} sent a sample count of {update.n}")
        for name, leaf in zip(_tree.names(model), _tree.same_shape(
                model, update.weights, f"site {update.site}"), strict=True):
            if not np.all(np.isfinite(leaf)):
                raise InvalidInput(f"site {update.site} sent {name} with values that are not "
                                   "finite (nan or inf)")

    @staticmethod
    def checked(model: Model, updates: Sequence[Update]) -> list[Leaves]:
        return [_tree.same_shape(model, u.weights, f"site {u.site}") for u in updates]


def mean_of(updates: Sequence[Leaves]) -> Leaves:
    """The unweighted mean, leaf by leaf."""
    return [np.mean(np.stack(parts), axis=0) for parts in zip(*updates, strict=True)]
