"""Server optimisers over the aggregated delta (Reddi et al. 2021, "Adaptive Federated
Optimization"): the FedAvg of the sites' models minus the global model is a pseudo-gradient
the server steps along with Adam, Yogi, Adagrad, or momentum SGD (FedAvgM, Hsu et al. 2019).

The update rules follow Flower's strategies of the same names, so a run here and a run there
agree to rounding (tests/unit/test_workflows_flower.py checks it against `flwr` itself),
including FedAdam's bias correction with exponent `round + 1`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from cairn.spec.workflow import FedAdagradParams, FedAdamParams, FedAvgMParams, FedYogiParams
from cairn.worker.workflows import _tree
from cairn.worker.workflows._tree import Leaves, Model
from cairn.worker.workflows.base import Update, Workflow


class _FedOpt(Workflow):
    beta_1: float = 0.9
    tau: float = 1e-9
    server_lr: float = 0.1

    def __init__(self) -> None:
        self.m: Leaves | None = None
        self.v: Leaves | None = None

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        values = self.checked(model, updates)
        current = _tree.leaves(model)
        averaged = _tree.weighted_mean(values, [u.n for u in updates])
        delta = [a - x for a, x in zip(averaged, current, strict=True)]
        if self.m is None or self.v is None:
            self.m, self.v = _tree.zeros_like(delta), _tree.zeros_like(delta)
        self.m = [self.beta_1 * m + (1 - self.beta_1) * d
                  for m, d in zip(self.m, delta, strict=True)]
        self.v = [self._second_moment(v, d) for v, d in zip(self.v, delta, strict=True)]
        lr = self._step_size(rnd)
        return _tree.rebuild(model, [x + lr * m / (np.sqrt(v) + self.tau)
                                     for x, m, v in zip(current, self.m, self.v, strict=True)])

    def _second_moment(self, v: np.ndarray, d: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _step_size(self, rnd: int) -> float:
        return self.server_lr


class FedAdam(_FedOpt):
    """Adam on the server; bias-corrected step `lr * sqrt(1-b2^(t+1)) / (1-b1^(t+1))`."""

    name: ClassVar[str] = "fedadam"

    def __init__(self, params: FedAdamParams | None = None) -> None:
        super().__init__()
        p = self.params = params or FedAdamParams()
        self.server_lr, self.beta_1, self.beta_2, self.tau = (p.server_lr, p.beta_1,
                                                              p.beta_2, p.tau)

    def _second_moment(self, v: np.ndarray, d: np.ndarray) -> np.ndarray:
        return np.asarray(self.beta_2 * v + (1 - self.beta_2) * d * d)

    def _step_size(self, rnd: int) -> float:
        return float(self.server_lr * np.sqrt(1 - self.beta_2 ** (rnd + 1.0))
                     / (1 - self.beta_1 ** (rnd + 1.0)))


class FedYogi(_FedOpt):
    """Yogi on the server: the second moment moves by sign, so it grows more cautiously."""

    name: ClassVar[str] = "fedyogi"

    def __init__(self, params: FedYogiParams | None = None) -> None:
        super().__init__()
        p = self.params = params or FedYogiParams()
        self.server_lr, self.beta_1, self.beta_2, self.tau = (p.server_lr, p.beta_1,
                                                              p.beta_2, p.tau)

    def _second_moment(self, v: np.ndarray, d: np.ndarray) -> np.ndarray:
        return np.asarray(v - (1.0 - self.beta_2) * d * d * np.sign(v - d * d))


class FedAdagrad(_FedOpt):
    """Adagrad on the server: the second moment is the running sum of squared deltas."""

    name: ClassVar[str] = "fedadagrad"

    def __init__(self, params: FedAdagradParams | None = None) -> None:
        super().__init__()
        p = self.params = params or FedAdagradParams()
        self.server_lr, self.beta_1, self.tau = p.server_lr, p.beta_1, p.tau

    def _second_moment(self, v: np.ndarray, d: np.ndarray) -> np.ndarray:
        return np.asarray(v + d * d)


class FedAvgM(Workflow):
    """Momentum SGD on the server: `v = momentum * v + (x - avg)`, `x -= server_lr * v`."""

    name: ClassVar[str] = "fedavgm"

    def __init__(self, params: FedAvgMParams | None = None) -> None:
        self.params = params or FedAvgMParams()
        self.velocity: Leaves | None = None

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        values = self.checked(model, updates)
        current = _tree.leaves(model)
        averaged = _tree.weighted_mean(values, [u.n for u in updates])
        pseudo = [x - a for x, a in zip(current, averaged, strict=True)]
        if self.params.momentum > 0:
            self.velocity = pseudo if self.velocity is None else [
                self.params.momentum * v + g for v, g in zip(self.velocity, pseudo, strict=True)]
            pseudo = self.velocity
        return _tree.rebuild(model, [x - self.params.server_lr * g
                                     for x, g in zip(current, pseudo, strict=True)])
