"""The server role (on the hub): the job's workflow over the clients' state_dicts, scored
each round on the hub's public test split; the result has the accuracy per round and, with
cross-site evaluation, the matrix."""

from __future__ import annotations

import numpy as np
import torch

from cairn.worker import Worker, main
from cairn.worker.rounds import run_server
from digits import net as cnn


async def run(w: Worker) -> None:
    torch.set_num_threads(1)
    x, y = cnn.load(w.data_dir / "shared" / "digits" / "public_test.npz")
    model = cnn.Net()
    result = await run_server(
        w, initial=cnn.initial(int(w.params.get("seed", 0))),
        evaluate=lambda weights: {"accuracy": cnn.accuracy(model, weights, x, y)})
    path = w.workdir / "model.npz"
    np.savez(path, **result.model)
    value = {
        "workflow": result.workflow,
        "accuracy": [r.metrics["accuracy"] for r in result.rounds],
        "rounds": [{"round": r.round, "sites": r.sites, "wall_s": r.wall_s,
                    "overhead_s": r.overhead_s, **r.metrics} for r in result.rounds],
    }
    if result.cross_site is not None:
        value["cross_site_evaluation"] = result.cross_site.to_json()
    await w.result(value, files=[path])


if __name__ == "__main__":
    main(run)
