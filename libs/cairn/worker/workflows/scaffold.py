"""SCAFFOLD (Karimireddy et al. 2020): control variates correct each client's drift.

The server keeps `c`, each client its own `c_i` (zeros at first). Every local gradient step
of a client adds `c - c_i` (`ctx.correction`); after `K` steps at rate `lr` from the global
`x` to its `y_i` the client sets `c_i+ = c_i - c + (x - y_i) / (K * lr)` (the paper's option
II) and sends `y_i` and `c_i+ - c_i`. The server moves `x += server_lr * mean(y_i - x)` and
`c += |S|/N * mean(c_i+ - c_i)`, with `|S|` the sites that answered and `N` every site it
knows. The job's `train` reports `K` and `lr` in `ctx.local_steps` and `ctx.local_lr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.errors import InvalidInput
from cairn.spec.workflow import ScaffoldParams
from cairn.worker.workflows import _tree
from cairn.worker.workflows._tree import Leaves, Model
from cairn.worker.workflows.base import ClientRound, ClientState, Update, Workflow, mean_of


class _ScaffoldClient(ClientState):
    def __init__(self) -> None:
        self.c_i: Leaves | None = None
        self.c: Leaves | None = None

    def round(self, rnd: int, task: dict[str, Any], model: Model, name: str) -> ClientRound:
        control = task.get("control")
        self.c = _tree.same_shape(model, control, "the server's control variate") \
            if control is not None else _tree.zeros_like(_tree.leaves(model))
        if self.c_i is None:
            self.c_i = _tree.zeros_like(self.c)
        correction = _tree.rebuild(model, [c - ci for c, ci in zip(self.c, self.c_i,
                                                                    strict=True)])
        return ClientRound(round=rnd, workflow=name, global_model=model,
                           correction=correction)

    def extras(self, ctx: ClientRound, trained: Model) -> dict[str, Any]:
        if not ctx.local_steps or not ctx.local_lr or ctx.local_steps < 1 \
                or ctx.local_lr <= 0:
            raise InvalidInput("scaffold: train() must set ctx.local_steps (> 0) and "
                               "ctx.local_lr (> 0): the control variate needs them")
        assert self.c is not None and self.c_i is not None
        x, y = _tree.leaves(ctx.global_model), _tree.leaves(trained)
        scale = 1.0 / (ctx.local_steps * ctx.local_lr)
        new_ci = [ci - c + (a - b) * scale
                  for ci, c, a, b in zip(self.c_i, self.c, x, y, strict=True)]
        delta = [n - o for n, o in zip(new_ci, self.c_i, strict=True)]
        self.c_i = new_ci
        return {"control_delta": _tree.rebuild(ctx.global_model, delta)}


class Scaffold(Workflow):
    """SCAFFOLD's server side (see the module docstring)."""

    name: ClassVar[str] = "scaffold"

    def __init__(self, params: ScaffoldParams | None = None) -> None:
        self.params = params or ScaffoldParams()
        self.c: Leaves | None = None
        self.total = 0

    def known_clients(self, count: int) -> None:
        self.total = max(self.total, count)

    def task(self, rnd: int, model: Model) -> dict[str, Any]:
        if self.c is None:
            self.c = _tree.zeros_like(_tree.leaves(model))
        return {"control": _tree.rebuild(model, self.c)}

    def check(self, model: Model, update: Update) -> None:
        super().check(model, update)
        if "control_delta" not in update.extras:
            raise InvalidInput(f"scaffold: site {update.site} sent no control_delta (is its "
                               "client on the scaffold workflow?)")
        delta = _tree.same_shape(model, update.extras["control_delta"],
                                 f"site {update.site}'s control delta")
        if not all(np.all(np.isfinite(d)) for d in delta):
            raise InvalidInput(f"scaffold: site {update.site}'s control delta is not finite")

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        values = self.checked(model, updates)
        x = _tree.leaves(model)
        if self.c is None:
            self.c = _tree.zeros_like(x)
        deltas = []
        for u in updates:
            if "control_delta" not in u.extras:
                raise InvalidInput(f"scaffold: site {u.site} sent no control_delta (is its "
                                   "client on the scaffold workflow?)")
            deltas.append(_tree.same_shape(model, u.extras["control_delta"],
                                           f"site {u.site}'s control delta"))
        moved = mean_of([[y - a for y, a in zip(v, x, strict=True)] for v in values])
        share = len(updates) / max(self.total, len(updates))
        self.c = [c + share * d for c, d in zip(self.c, mean_of(deltas), strict=True)]
        return _tree.rebuild(model, [a + self.params.server_lr * m
                                     for a, m in zip(x, moved, strict=True)])

    def client(self) -> ClientState:
        return _ScaffoldClient()
