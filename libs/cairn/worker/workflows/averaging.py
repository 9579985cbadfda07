"""Workflows that combine the sites' models directly: FedAvg, FedProx, and the robust ones
(coordinate-wise median, trimmed mean)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from cairn.spec.workflow import FedProxParams, TrimmedMeanParams
from cairn.worker.workflows import _tree
from cairn.worker.workflows._tree import Model
from cairn.worker.workflows.base import ClientRound, ClientState, Update, Workflow


class FedAvg(Workflow):
    """The sites' models averaged, each weighted by its sample count (McMahan et al. 2017)."""

    name: ClassVar[str] = "fedavg"

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        values = self.checked(model, updates)
        return _tree.rebuild(model, _tree.weighted_mean(values, [u.n for u in updates]))


class _Proximal(ClientState):
    def __init__(self, mu: float) -> None:
        self.mu = mu

    def round(self, rnd: int, task: dict[str, Any], model: Model, name: str) -> ClientRound:
        return ClientRound(round=rnd, workflow=name, global_model=model, mu=self.mu)


class FedProx(FedAvg):
    """FedAvg's aggregation; each client adds `mu/2 * ||w - w_global||^2` to its local loss,
    which keeps heterogeneous sites from drifting apart (Li et al. 2020). `mu` reaches the
    job's `train` as `ctx.mu` (and `ctx.proximal_grad(w)`)."""

    name: ClassVar[str] = "fedprox"

    def __init__(self, params: FedProxParams | None = None) -> None:
        self.params = params or FedProxParams()

    def client(self) -> ClientState:
        return _Proximal(self.params.mu)


class Median(Workflow):
    """The coordinate-wise median of the sites' models (sample counts are ignored): robust
    to a minority of sites sending garbage (Yin et al. 2018)."""

    name: ClassVar[str] = "median"

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        values = self.checked(model, updates)
        return _tree.rebuild(model, [np.median(np.stack(parts), axis=0)
                                     for parts in zip(*values, strict=True)])


class TrimmedMean(Workflow):
    """Per coordinate, the `beta` fraction of sites at each end is cut and the rest averaged
    (sample counts ignored; Yin et al. 2018). With fewer sites than 1/beta nothing is cut."""

    name: ClassVar[str] = "trimmed-mean"

    def __init__(self, params: TrimmedMeanParams | None = None) -> None:
        self.params = params or TrimmedMeanParams()

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        values = self.checked(model, updates)
        return _tree.rebuild(model, [_trimmed(np.stack(parts), self.params.beta)
                                     for parts in zip(*values, strict=True)])


def _trimmed(stacked: np.ndarray, beta: float) -> np.ndarray:
    count = stacked.shape[0]
    cut = int(beta * count)
    ordered = np.sort(stacked, axis=0)
    return np.asarray(np.mean(ordered[cut:count - cut], axis=0))
