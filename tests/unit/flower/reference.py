"""Run inside a venv with `flwr`: aggregate the given client updates with Flower's own
strategies, round after round, and write every round's global model.

    python reference.py IN.npz OUT.npz

IN holds `initial_<i>` (the model's arrays), `n_<r>_<c>` (samples) and `w_<r>_<c>_<i>` (the
arrays of client c in round r). OUT gets `<strategy>_<r>_<i>`.
"""

from __future__ import annotations

import sys

import numpy as np
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import (
    FedAdagrad,
    FedAdam,
    FedAvg,
    FedAvgM,
    FedMedian,
    FedProx,
    FedTrimmedAvg,
    FedYogi,
)


def main(src: str, dst: str) -> None:
    data = np.load(src)
    leaves = sorted(int(k.split("_")[1]) for k in data.files if k.startswith("initial_"))
    initial = [data[f"initial_{i}"] for i in leaves]
    rounds = sorted({int(k.split("_")[1]) for k in data.files if k.startswith("n_")})
    clients = sorted({int(k.split("_")[2]) for k in data.files if k.startswith("n_")})
    start = ndarrays_to_parameters(initial)
    strategies = {
        "fedavg": FedAvg(initial_parameters=start),
        "fedprox": FedProx(initial_parameters=start, proximal_mu=0.1),
        "fedadam": FedAdam(initial_parameters=start, eta=0.1, beta_1=0.9, beta_2=0.99,
                           tau=1e-9),
        "fedyogi": FedYogi(initial_parameters=start, eta=0.01, beta_1=0.9, beta_2=0.99,
                           tau=1e-3),
        "fedadagrad": FedAdagrad(initial_parameters=start, eta=0.1, tau=1e-9),
        "fedavgm": FedAvgM(initial_parameters=start, server_learning_rate=1.0,
                           server_momentum=0.9),
        "median": FedMedian(initial_parameters=start),
        "trimmed-mean": FedTrimmedAvg(initial_parameters=start, beta=0.2),
    }
    out: dict[str, np.ndarray] = {}
    for name, strategy in strategies.items():
        for r in rounds:
            results = []
            for c in clients:
                weights = [data[f"w_{r}_{c}_{i}"] for i in leaves]
                res = FitRes(status=Status(code=Code.OK, message=""),
                             parameters=ndarrays_to_parameters(weights),
                             num_examples=int(data[f"n_{r}_{c}"]), metrics={})
                results.append((None, res))
            params, _ = strategy.aggregate_fit(r, results, [])
            assert params is not None
            for i, arr in zip(leaves, parameters_to_ndarrays(params), strict=True):
                out[f"{name}_{r}_{i}"] = arr
    np.savez(dst, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
