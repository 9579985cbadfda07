"""The client role (one per site): trains on this site's data only, `$CAIRN_DATA/shared/fedavg`.

Each round it reports the received global model's accuracy on its local test split (before
training), then trains `epochs` steps and sends back the weights and its sample count. It
runs under any workflow of the library (`workflow:` in job.yaml): FedProx's proximal term and
SCAFFOLD's correction come in `ctx`, and `evaluate` scores models for cross-site evaluation.
Param `delay` (seconds) adds simulated compute per round, for tests and benchmarks.
"""

from __future__ import annotations

import time

from cairn.worker import Worker, main
from cairn.worker.rounds import run_client
from cairn.worker.workflows import ClientRound
from fedavg import model as lr


async def run(w: Worker) -> None:
    folder = w.data_dir / "shared" / "fedavg"
    x, y = lr.load(folder / "train.npz")
    x_test, y_test = lr.load(folder / "test.npz")
    epochs, rate = int(w.params.get("epochs", 20)), float(w.params.get("lr", 0.5))
    delay = float(w.params.get("delay", 0.0))

    def train(model: lr.Model, rnd: int,
              ctx: ClientRound) -> tuple[lr.Model, float, dict[str, float]]:
        local = lr.accuracy(model, x_test, y_test)
        trained = lr.train(model, x, y, epochs=epochs, lr=rate, mu=ctx.mu,
                           correction=ctx.correction)
        ctx.local_steps, ctx.local_lr = epochs, rate  # what SCAFFOLD needs to know
        time.sleep(delay)
        return trained, float(len(y)), {"local_accuracy": local}

    await run_client(w, train, evaluate=lambda model: {
        "accuracy": lr.accuracy(model, x_test, y_test)})


if __name__ == "__main__":
    main(run)
