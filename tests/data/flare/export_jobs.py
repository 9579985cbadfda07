"""Export the FLARE job folders under jobs/ with NVIDIA FLARE's own Job API.

    <a Python with nvflare> tests/data/flare/export_jobs.py OUT_DIR

Run by tools/flare_venv.py's Python (PyPI nvflare in a venv of its own: never in Cairn's
environment). tests/integration/test_import_flare.py converts the committed folders and
runs them, and exports them again with this script to check they are what FLARE writes.

- hello-numpy: FedAvg (num_rounds 3, 2 clients, an initial model) with the trainer of
  examples/flare-numpy/app/client.py on two sites, one sending FULL and one DIFF updates;
- hello-numpy-diff: the same with both trainers sending DIFF updates (`make bench` runs it
  on FLARE's simulator and on `cairn sim`, and compares what the trainers received);
- hello-numpy-sag: the same trainer under ScatterAndGather with a numpy model persistor,
  the accumulating weighted aggregator and the full-model shareable generator, deployed to
  every site (`@ALL`).
"""

import shutil
import sys
from pathlib import Path

from nvflare.app_common.aggregators.intime_accumulate_model_aggregator import (
    InTimeAccumulateWeightedAggregator,
)
from nvflare.app_common.np.np_model_persistor import NPModelPersistor
from nvflare.app_common.shareablegenerators.full_model_shareable_generator import (
    FullModelShareableGenerator,
)
from nvflare.app_common.workflows.fedavg import FedAvg
from nvflare.app_common.workflows.scatter_and_gather import ScatterAndGather
from nvflare.job_config.api import FedJob
from nvflare.job_config.script_runner import FrameworkType, ScriptRunner

INITIAL = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
TRAINER = Path(__file__).resolve().parents[3] / "examples" / "flare-numpy" / "app" / "client.py"


def fedavg(out: Path, name: str = "hello-numpy", first: str = "full") -> None:
    job = FedJob(name=name, min_clients=2)
    job.to_server(FedAvg(num_clients=2, num_rounds=3, model={"numpy_key": INITIAL}))
    for site, args in (("site-1", f"--update_type {first} --lr 1.0 --steps 1"),
                       ("site-2", "--update_type diff --lr 2.0 --steps 3")):
        job.to(ScriptRunner(script="client.py", script_args=args,
                            framework=FrameworkType.NUMPY), site)
    job.export_job(str(out))


def scatter_and_gather(out: Path) -> None:
    job = FedJob(name="hello-numpy-sag", min_clients=2)
    persistor = job.to_server(NPModelPersistor(), id="persistor")
    job.to_server(InTimeAccumulateWeightedAggregator(expected_data_kind="WEIGHTS"),
                  id="aggregator")
    job.to_server(FullModelShareableGenerator(), id="shareable_generator")
    job.to_server(ScatterAndGather(min_clients=2, num_rounds=2, persistor_id=persistor,
                                   aggregator_id="aggregator",
                                   shareable_generator_id="shareable_generator",
                                   train_timeout=60))
    job.to_clients(ScriptRunner(script="client.py", script_args="--update_type full",
                                framework=FrameworkType.NUMPY))
    job.export_job(str(out))


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / ".src"
    work.mkdir(exist_ok=True)
    shutil.copy(TRAINER, work / "client.py")
    import os

    os.chdir(work)  # the Job API takes the script from the working directory
    fedavg(out)
    fedavg(out, "hello-numpy-diff", first="diff")
    scatter_and_gather(out)
    os.chdir(out)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
