"""FLARE's `FLModel` and the names its trainers import with it, written for Cairn.

Semantics follow FLARE's Client API documentation: `params` is a dict of arrays (the model,
or with `params_type` DIFF the change to the received model), `metrics` a dict of numbers,
`meta` free-form (`NUM_STEPS_CURRENT_ROUND` weighs the update in FedAvg), `current_round`
counts from 0 and `total_rounds` is the job's number of rounds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ParamsType(enum.StrEnum):
    """What `FLModel.params` holds: the whole model, or its change to the received one."""

    FULL = "FULL"
    DIFF = "DIFF"


class FLModelConst:
    """Key names of FLARE's FLModel fields and meta entries."""

    PARAMS_TYPE = "params_type"
    PARAMS = "params"
    OPTIMIZER_PARAMS = "optimizer_params"
    METRICS = "metrics"
    CURRENT_ROUND = "current_round"
    START_ROUND = "start_round"
    TOTAL_ROUNDS = "total_rounds"
    META = "meta"


class MetaKey:
    """Well-known keys of `FLModel.meta`."""

    NUM_STEPS_CURRENT_ROUND = "NUM_STEPS_CURRENT_ROUND"
    CURRENT_ROUND = "current_round"
    TOTAL_ROUNDS = "total_rounds"
    JOB_ID = "job_id"
    SITE_NAME = "site_name"
    INITIAL_METRICS = "initial_metrics"


class NPConstants:
    """The numpy examples' names (`nvflare.app_common.np.constants`)."""

    NUMPY_KEY = "numpy_key"
    MODEL_FILE_NAME = "server.npy"
    RECEIVED_MODEL = "received_model"
    TRAINED_MODEL = "trained_model"


@dataclass
class FLModel:
    """A model (or model update) with its metrics and round, as FLARE's trainers build it."""

    params_type: ParamsType | str | None = None
    params: dict[str, Any] | None = None
    optimizer_params: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    start_round: int | None = 0
    current_round: int | None = None
    total_rounds: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.meta is None:
            self.meta = {}

    def summary(self) -> dict[str, Any]:
        """What the model holds, without its values (for logs)."""
        return {"params_type": params_type_of(self).value if self.params else None,
                "params": sorted(self.params or {}), "metrics": self.metrics,
                "current_round": self.current_round, "total_rounds": self.total_rounds,
                "meta": sorted(self.meta)}

    def __str__(self) -> str:
        return f"FLModel({self.summary()})"


def params_type_of(model: FLModel) -> ParamsType:
    """The model's params type; FULL when it names none.

    Raises:
        ValueError: a params type FLARE does not have (it names the ones there are).
    """
    raw = model.params_type
    if raw is None:
        return ParamsType.FULL
    try:
        return ParamsType(raw.value if isinstance(raw, ParamsType) else str(raw).upper())
    except ValueError:
        raise ValueError(f"FLModel.params_type {raw!r}: use ParamsType.FULL or "
                         "ParamsType.DIFF") from None
