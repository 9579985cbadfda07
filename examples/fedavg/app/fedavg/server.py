"""The server role (runs on the hub): FedAvg rounds, evaluated on the hub's public test set.

The server never reads a site's data: it evaluates on `public_test.npz`, a small synthetic
set that the setup step writes into the hub's own dataset folder.
"""

from __future__ import annotations

import numpy as np

from cairn.worker import Worker, main
from cairn.worker.rounds import run_server
from fedavg import model as lr


async def run(w: Worker) -> None:
    x_pub, y_pub = lr.load(w.data_dir / "shared" / "fedavg" / "public_test.npz")
    result = await run_server(
        w, initial=lr.init(x_pub.shape[1]),
        evaluate=lambda m: {"accuracy": lr.accuracy(m, x_pub, y_pub)})
    path = w.workdir / "model.npz"
    np.savez(path, **result.model)
    value = {
        "workflow": result.workflow,
        "accuracy": [r.metrics["accuracy"] for r in result.rounds],
        "rounds": [{"round": r.round, "sites": r.sites, "wall_s": r.wall_s,
                    "max_compute_s": r.max_compute_s, "overhead_s": r.overhead_s,
                    **r.metrics} for r in result.rounds],
    }
    if result.cross_site is not None:
        value["cross_site_evaluation"] = result.cross_site.to_json()
    await w.result(value, files=[path])


if __name__ == "__main__":
    main(run)
