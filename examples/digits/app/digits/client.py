"""The client role (one per site): trains on `$CAIRN_DATA/shared/digits/train.npz` only and,
for cross-site evaluation, scores any model on its own `test.npz`."""

from __future__ import annotations

import numpy as np
import torch

from cairn.worker import Worker, main
from cairn.worker.rounds import run_client
from cairn.worker.workflows import ClientRound
from digits import net as cnn


async def run(w: Worker) -> None:
    torch.set_num_threads(1)
    folder = w.data_dir / "shared" / "digits"
    x, y = cnn.load(folder / "train.npz")
    x_test, y_test = cnn.load(folder / "test.npz")
    epochs, lr = int(w.params.get("epochs", 3)), float(w.params.get("lr", 0.05))
    momentum = float(w.params.get("momentum", 0.9))
    batch, seed = int(w.params.get("batch", 32)), int(w.params.get("seed", 0))
    net = cnn.Net()

    def train(weights: dict[str, np.ndarray], rnd: int,
              ctx: ClientRound) -> tuple[dict[str, np.ndarray], float, dict[str, float]]:
        local = cnn.accuracy(net, weights, x_test, y_test)
        trained = cnn.train(net, weights, x, y, ctx, epochs=epochs, lr=lr, batch=batch,
                            seed=seed * 1000 + rnd, momentum=momentum)
        return trained, float(len(y)), {"local_accuracy": local}

    await run_client(w, train, evaluate=lambda weights: {
        "accuracy": cnn.accuracy(net, weights, x_test, y_test)})


if __name__ == "__main__":
    main(run)
