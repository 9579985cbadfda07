"""`workflow:` in job.yaml: the federated workflow by name, its parameters, its privacy.

    workflow:
      name: fedprox              # fedavg fedprox fedadam fedyogi fedadagrad fedavgm scaffold
                                 # cyclic median trimmed-mean
      params: {mu: 0.01}         # the workflow's own; an unknown one is an error
      rounds: 5
      min_sites: 2               # answers a round needs (the dropout rule)
      round_timeout: 2m          # how long a round waits for them
      cross_site_eval: true      # every site scores every site's model and the global one
      privacy:
        dp: {clip: 1.0, noise_multiplier: 1.1, delta: 1.0e-5}   # or dp: false
        exclude: ["bn.*"]        # parameter names that never leave a site

Each workflow declares its parameters here as a strict Struct with defaults, so the loader
refuses a typo naming the field (`workflow.params.mu`), without importing numpy: the
implementations live in `cairn.worker.workflows` (docs/workflows.md).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec

from cairn.events.workflow import DPRule, PrivacyRule, WorkflowRequest
from cairn.spec._located import Located
from cairn.spec.duration import parse_duration
from cairn.yamlfile import PathKey, YamlDocument, convert

MAX_ROUNDS = 100_000
MAX_EXCLUDE = 1000
MAX_MIN_SITES = 10_000  # as a job role's min_sites (cairn.spec.job.MAX_SITES)


class FedAvgParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """FedAvg takes no parameters: the mean of the sites' models weighted by samples."""


class FedProxParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    mu: float = 0.01
    """Weight of the client's proximal term mu/2 * ||w - w_global||^2."""


class FedAdamParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    server_lr: float = 0.1
    beta_1: float = 0.9
    beta_2: float = 0.99
    tau: float = 1e-9


class FedYogiParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    server_lr: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.99
    tau: float = 1e-3


class FedAdagradParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    server_lr: float = 0.1
    beta_1: float = 0.0
    tau: float = 1e-9


class FedAvgMParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    server_lr: float = 1.0
    momentum: float = 0.9


class ScaffoldParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    server_lr: float = 1.0


class CyclicParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    order: Literal["fixed", "shuffled"] = "fixed"
    """`fixed`: the sites in name order every round; `shuffled`: a new order each round,
    drawn from `seed` and the round number (the same on a rerun)."""
    seed: int = 0


class MedianParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The coordinate-wise median of the sites' models takes no parameters."""


class TrimmedMeanParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    beta: float = 0.2
    """Fraction of the sites cut at each end of every coordinate, before the mean."""


WORKFLOWS: dict[str, type[msgspec.Struct]] = {
    "fedavg": FedAvgParams,
    "fedprox": FedProxParams,
    "fedadam": FedAdamParams,
    "fedyogi": FedYogiParams,
    "fedadagrad": FedAdagradParams,
    "fedavgm": FedAvgMParams,
    "scaffold": ScaffoldParams,
    "cyclic": CyclicParams,
    "median": MedianParams,
    "trimmed-mean": TrimmedMeanParams,
}
"""Every workflow a job may name, with its parameters."""

# name -> (low, high, low_open, high_open): the range a parameter of that name must be in.
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "mu": (0.0, math.inf, False, True),
    "server_lr": (0.0, math.inf, True, True),
    "beta_1": (0.0, 1.0, False, True),
    "beta_2": (0.0, 1.0, False, True),
    "momentum": (0.0, 1.0, False, True),
    "tau": (0.0, math.inf, True, True),
    "beta": (0.0, 0.5, False, True),
}


def workflow_params(name: str, params: dict[str, Any]) -> msgspec.Struct:
    """The typed parameters of workflow `name` (already checked by the loader)."""
    return msgspec.convert(params, WORKFLOWS[name], strict=False)


class _RawDP(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    clip: float
    noise_multiplier: float
    delta: float = 1e-5


class _RawPrivacy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    dp: _RawDP | bool | None = None
    exclude: list[str] = []


class _RawSitePrivacy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    dp: _RawDP | None = None
    exclude: list[str] = []


class _RawWorkflow(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    params: dict[str, Any] = {}
    rounds: int | None = None
    min_sites: int | None = None
    round_timeout: int | str | None = None
    cross_site_eval: bool = False
    privacy: _RawPrivacy | None = None


def parse_workflow(doc: YamlDocument, where: Located, data: Any,
                   at: PathKey = ("workflow",)) -> WorkflowRequest:
    """The job's `workflow:` section, every value checked and located.

    Raises:
        InvalidInput: an unknown workflow or parameter, or a value out of range.
    """
    raw = convert(doc, _RawWorkflow, data, at)
    if raw.name not in WORKFLOWS:
        raise where.error((*at, "name"), f"unknown workflow {raw.name!r} (known: "
                          f"{', '.join(WORKFLOWS)})")
    params = convert(doc, WORKFLOWS[raw.name], raw.params, (*at, "params"))
    for key in raw.params:
        if key in _RANGES:
            _in_range(where, (*at, "params", key), key, float(getattr(params, key)))
    if raw.rounds is not None and not 1 <= raw.rounds <= MAX_ROUNDS:
        raise where.error((*at, "rounds"), f"must be between 1 and {MAX_ROUNDS}")
    if raw.min_sites is not None and not 1 <= raw.min_sites <= MAX_MIN_SITES:
        raise where.error((*at, "min_sites"), "must be 1 or more" if raw.min_sites < 1
                          else f"{raw.min_sites} is more than the limit of {MAX_MIN_SITES}")
    timeout = None
    if raw.round_timeout is not None:
        timeout = float(where.check((*at, "round_timeout"), parse_duration, raw.round_timeout))
        if timeout <= 0:
            raise where.error((*at, "round_timeout"), "must be more than 0")
    privacy = None
    if raw.privacy is not None:
        privacy = _privacy(where, (*at, "privacy"), raw.privacy.dp, raw.privacy.exclude)
    return WorkflowRequest(name=raw.name, params=msgspec.to_builtins(params),
                           rounds=raw.rounds, min_sites=raw.min_sites, round_timeout_s=timeout,
                           cross_site_eval=raw.cross_site_eval, privacy=privacy)


def parse_site_privacy(doc: YamlDocument, where: Located, data: Any,
                       at: PathKey) -> PrivacyRule:
    """A study's `privacy:` in study_runtime.yaml: what the site requires of every job."""
    raw = convert(doc, _RawSitePrivacy, data, at)
    return _privacy(where, at, raw.dp, raw.exclude)


def _privacy(where: Located, at: PathKey, dp: _RawDP | bool | None,
             exclude: list[str]) -> PrivacyRule:
    rule = None
    if dp is True:
        raise where.error((*at, "dp"), "write the mechanism, e.g. dp: {clip: 1.0, "
                          "noise_multiplier: 1.0}, or dp: false to turn it off")
    if isinstance(dp, _RawDP):
        if not (math.isfinite(dp.clip) and dp.clip > 0):
            raise where.error((*at, "dp", "clip"), "must be a number more than 0")
        if not (math.isfinite(dp.noise_multiplier) and dp.noise_multiplier > 0):
            raise where.error((*at, "dp", "noise_multiplier"), "must be a number more than 0 "
                              "(no noise is no differential privacy: write dp: false)")
        if not 0 < dp.delta < 1:
            raise where.error((*at, "dp", "delta"), "must be between 0 and 1 (exclusive)")
        rule = DPRule(clip=dp.clip, noise_multiplier=dp.noise_multiplier, delta=dp.delta)
    if len(exclude) > MAX_EXCLUDE:
        raise where.error((*at, "exclude"), f"more than {MAX_EXCLUDE} patterns")
    for index, pattern in enumerate(exclude):
        if not pattern.strip():
            raise where.error((*at, "exclude", index), "an empty pattern excludes nothing")
    return PrivacyRule(dp=rule, dp_off=dp is False, exclude=list(exclude))


def _in_range(where: Located, path: PathKey, key: str, value: float) -> None:
    low, high, low_open, high_open = _RANGES[key]
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not math.isfinite(value) or not (above and below):
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise where.error(path, f"{value:g} is outside {left}{low:g}, {high:g}{right}")
