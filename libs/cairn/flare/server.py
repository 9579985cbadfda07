"""`python -m cairn.flare.server`: the server role of a FLARE job (FedAvg, ScatterAndGather).

Cairn's FedAvg (`cairn.worker.rounds.run_server`) with the settings a FLARE job has, from
the job's params: `rounds` (FLARE `num_rounds`), `min_sites` (`min_clients`),
`round_timeout`, and `initial_model` (the model the first round sends: a dict of arrays
written as nested lists, e.g. `{"numpy_key": [[1, 2, 3]]}`; `{}` when the FLARE job had
none, as FLARE sends an empty model then). Its result: per round, the sites that answered
and the clients' metrics weighted by their updates; the final model is `model.npz`.
"""

from __future__ import annotations

from typing import Any

from cairn.errors import InvalidInput
from cairn.worker import Worker, main
from cairn.worker.rounds import run_server


def initial_model(params: dict[str, Any]) -> dict[str, Any]:
    """The first round's model from params `initial_model`.

    Raises:
        InvalidInput: not a mapping of names to numbers or nested lists of numbers.
    """
    import numpy as np

    raw = params.get("initial_model") or {}
    if not isinstance(raw, dict):
        raise InvalidInput("params initial_model must map parameter names to arrays",
                           field="params.initial_model")
    model = {}
    for name, value in raw.items():
        try:
            model[str(name)] = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"params initial_model.{name}: not an array of numbers: {exc}",
                               field=f"params.initial_model.{name}") from None
    return model


async def run(w: Worker) -> None:
    import numpy as np

    result = await run_server(w, initial=initial_model(w.params))
    path = w.workdir / "model.npz"
    arrays: dict[str, Any] = {k: np.asarray(v) for k, v in (result.model or {}).items()}
    np.savez(path, **arrays)
    await w.result({
        "rounds": [{"round": r.round, "sites": r.sites, "n_samples": r.n_samples,
                    "wall_s": r.wall_s, "overhead_s": r.overhead_s, **r.metrics}
                   for r in result.rounds],
        "model": {k: np.asarray(v).tolist() for k, v in (result.model or {}).items()
                  if np.asarray(v).size <= 64},
    }, files=[path])


if __name__ == "__main__":
    main(run)
