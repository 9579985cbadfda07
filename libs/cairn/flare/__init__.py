"""NVIDIA FLARE compatibility: FLARE Client API trainers run unchanged as Cairn workers.

- `cairn.flare.model`: `FLModel`, `ParamsType` and the constants FLARE's examples import;
- `cairn.flare.client`: the Client API (`init`, `is_running`, `receive`, `send`, ...) over
  Cairn's federated rounds (`cairn.worker.rounds`), so the server is Cairn's FedAvg;
- `cairn.flare.tracking`: FLARE's `SummaryWriter`, as worker metrics;
- `cairn.flare.run`: `python -m cairn.flare.run SCRIPT [ARGS]`, what a role with
  `api: flare` runs: it puts `shim/` (a package directory named `nvflare` that only
  re-exports the modules above) first on the trainer's `sys.path`, then runs the script;
- `cairn.flare.server`: the server role of a FLARE job (FedAvg / ScatterAndGather);
- `cairn.flare.jobfolder`: `cairn job import-flare`, a FLARE job folder as a Cairn job.

`nvflare` is importable only inside such a worker: nothing is installed into the user's
environment under that name.
"""
