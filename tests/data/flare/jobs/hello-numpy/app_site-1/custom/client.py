"""A FLARE Client API trainer, written as FLARE's numpy examples are (it runs on NVIDIA FLARE
as it is, and on Cairn in a role with `api: flare`).

Its "training" moves every weight by `--lr`: the aggregated model after each round is then
known in advance (tests/integration/test_flare_client.py checks it), whether the trainer
sends the whole model (`--update_type full`) or its change (`--update_type diff`). Each
update is weighed by `--steps` (`NUM_STEPS_CURRENT_ROUND`), as FLARE's FedAvg weighs it.
"""

import argparse

import numpy as np
import nvflare.client as flare
from nvflare.app_common.np.constants import NPConstants
from nvflare.client.tracking import SummaryWriter


def train(weights: np.ndarray, lr: float) -> np.ndarray:
    return weights + lr


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--update_type", choices=["full", "diff"], default="full")
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()

    flare.init()
    site = flare.system_info()["site_name"]
    writer = SummaryWriter()
    while flare.is_running():
        received = flare.receive()
        if NPConstants.NUMPY_KEY in received.params:
            weights = np.asarray(received.params[NPConstants.NUMPY_KEY], dtype=np.float64)
        else:
            weights = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
        new = train(weights, args.lr)
        metrics = {"weight_mean": float(np.mean(new))}
        writer.add_scalar("weight_mean", metrics["weight_mean"],
                          global_step=received.current_round)
        print(f"{site}: round {received.current_round} of {received.total_rounds}: "
              f"{args.update_type} update, mean {metrics['weight_mean']:.3f}", flush=True)
        if args.update_type == "diff":
            params, params_type = new - weights, flare.ParamsType.DIFF
        else:
            params, params_type = new, flare.ParamsType.FULL
        flare.send(flare.FLModel(params={NPConstants.NUMPY_KEY: params},
                                 params_type=params_type, metrics=metrics,
                                 current_round=received.current_round,
                                 meta={"NUM_STEPS_CURRENT_ROUND": args.steps}))


if __name__ == "__main__":
    main()
