"""Cyclic weight transfer (Chang et al. 2018): the model visits the sites in turn.

Each round the server sends the model to one site, takes its trained model back and sends
that to the next; after the last site of the order the round ends. The order is the sites
in name order (`order: fixed`) or a permutation drawn from `seed` and the round number
(`order: shuffled`), so a rerun visits them the same way. A site that does not answer within
the round timeout is skipped (the model goes on from the site before it); a round that fewer
than `min_sites` sites trained fails the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from cairn.spec.workflow import CyclicParams
from cairn.worker.workflows._tree import Model
from cairn.worker.workflows.base import Update, Workflow


class Cyclic(Workflow):
    name: ClassVar[str] = "cyclic"
    cyclic: ClassVar[bool] = True

    def __init__(self, params: CyclicParams | None = None) -> None:
        self.params = params or CyclicParams()

    def order(self, rnd: int, sites: Sequence[str]) -> list[str]:
        """The order the sites are visited in this round."""
        ordered = sorted(sites)
        if self.params.order == "shuffled":
            rng = np.random.default_rng([self.params.seed, rnd])
            ordered = [ordered[i] for i in rng.permutation(len(ordered))]
        return ordered

    def aggregate(self, rnd: int, model: Model, updates: Sequence[Update]) -> Model:
        """The model the last site of the turn sent back."""
        self.checked(model, updates[-1:])
        return updates[-1].weights
