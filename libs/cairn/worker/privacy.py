"""Privacy filters on what leaves a site: excluded parameters, clipping, Gaussian noise, and
the epsilon they are worth.

A client's update is its trained model minus the model it received (the delta). Before it is
sent, at the site:

1. parameters whose dotted name matches an `exclude` pattern are reset to the received value
   (their delta is zero: nothing of the site's own value leaves it);
2. the delta of the rest is clipped to L2 norm `clip` (scaled by `min(1, clip / ||delta||)`);
3. Gaussian noise of standard deviation `noise_multiplier * clip` is added to every one of
   its coordinates;

and the model sent is the received one plus that delta. Clipping bounds what one site's
data can change (the sensitivity is `clip` when a site's contribution is added or removed,
as DP-FedAvg counts it, McMahan et al. 2018), so each release is the Gaussian mechanism.

The accountant (Rényi DP, Mironov 2017): a Gaussian mechanism with noise multiplier z is
(alpha, alpha / (2 z^2))-RDP for every order alpha > 1; T releases compose to
T * alpha / (2 z^2); and (alpha, r)-RDP gives (r + log(1/delta) / (alpha - 1), delta)-DP,
minimised here over a fixed grid of orders. Every release counts: a round of SCAFFOLD sends
two (the model and the control variate), so it costs two steps. The epsilon reported is the
total spent so far by this site in this job.

The filters run in the worker SDK (`run_client`), on what the site's agent says in force
(the site's rule merged with the job's, `cairn.spec.privacy`): they protect against careless
job code, not against job code written to bypass them (docs/workflows.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from cairn.events.workflow import PrivacyRule
from cairn.worker.workflows import _tree
from cairn.worker.workflows._tree import Leaves, Model

ORDERS: tuple[float, ...] = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0,
                             12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0, 512.0)
"""The Rényi orders the accountant minimises over."""


def gaussian_epsilon(noise_multiplier: float, releases: int, delta: float,
                     orders: Sequence[float] = ORDERS) -> float:
    """The epsilon of `releases` Gaussian mechanisms with `noise_multiplier`, at `delta`."""
    if releases <= 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    return min(releases * a / (2.0 * noise_multiplier ** 2) + math.log(1.0 / delta) / (a - 1.0)
               for a in orders)


class RdpAccountant:
    """Counts a site's releases under one Gaussian mechanism; says the epsilon spent."""

    def __init__(self, noise_multiplier: float, delta: float) -> None:
        self.noise_multiplier, self.delta = noise_multiplier, delta
        self.releases = 0

    def spend(self, releases: int = 1) -> None:
        self.releases += releases

    @property
    def epsilon(self) -> float:
        return gaussian_epsilon(self.noise_multiplier, self.releases, self.delta)


class PrivacyFilter:
    """One client's filters for one job (see the module docstring)."""

    def __init__(self, rule: PrivacyRule, rng: np.random.Generator | None = None) -> None:
        self.rule = rule
        # Unseeded by default: noise a reader could regenerate protects nothing.
        self.rng = rng if rng is not None else np.random.default_rng()
        self.accountant = None if rule.dp is None else RdpAccountant(
            rule.dp.noise_multiplier, rule.dp.delta)

    def excluded(self, name: str) -> bool:
        return any(fnmatchcase(name, pattern) for pattern in self.rule.exclude)

    def update(self, trained: Model, received: Model) -> tuple[Model, dict[str, float]]:
        """The model to send instead of `trained`, and what the filters did (metrics)."""
        keep = [not self.excluded(n) for n in _tree.names(received)]
        base = _tree.leaves(received)
        delta = [t - r if k else np.zeros_like(r)
                 for k, t, r in zip(keep, _tree.same_shape(received, trained, "train()"),
                                    base, strict=True)]
        delta, report = self.release(delta, keep)
        report["excluded_params"] = float(len(keep) - sum(keep))
        return _tree.rebuild(received, [r + d for r, d in zip(base, delta, strict=True)]), \
            report

    def release(self, delta: Leaves, keep: Sequence[bool] | None = None
                ) -> tuple[Leaves, dict[str, float]]:
        """`delta` clipped and noised (where `keep`), counted by the accountant."""
        dp = self.rule.dp
        if dp is None or self.accountant is None:
            return delta, {}
        keep = list(keep) if keep is not None else [True] * len(delta)
        size = _tree.norm([d for d, k in zip(delta, keep, strict=True) if k])
        scale = min(1.0, dp.clip / size) if size > 0 else 1.0
        std = dp.noise_multiplier * dp.clip
        out = [d * scale + self.rng.normal(0.0, std, size=np.shape(d)) if k else d
               for d, k in zip(delta, keep, strict=True)]
        self.accountant.spend()
        return out, {"dp_epsilon": self.accountant.epsilon, "dp_delta": dp.delta,
                     "dp_update_norm": size, "dp_clip_scale": scale, "dp_noise_std": std}

    def extra(self, tree: Model) -> tuple[Model, dict[str, Any]]:
        """Another release of this round (SCAFFOLD's control delta), filtered the same way."""
        keep = [not self.excluded(n) for n in _tree.names(tree)]
        values = [v if k else np.zeros_like(v)
                  for k, v in zip(keep, _tree.leaves(tree), strict=True)]
        released, report = self.release(values, keep)
        return _tree.rebuild(tree, released), report

    def keep_local(self, received: Model, local: Model) -> Model:
        """`received` with this site's own values for the excluded parameters: they never
        left, so the site trains on from its own (personalised layers, batch-norm stats)."""
        if not self.rule.exclude:
            return received
        try:
            mine = _tree.same_shape(received, local, "the last trained model")
        except Exception:
            return received  # the server changed the model's shape: start from its
        values = [m if self.excluded(n) else r for n, m, r in
                  zip(_tree.names(received), mine, _tree.leaves(received), strict=True)]
        return _tree.rebuild(received, values)
