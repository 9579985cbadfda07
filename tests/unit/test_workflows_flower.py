"""Cairn's aggregation equals Flower's (PyPI `flwr`), fed identical client updates.

flwr pins versions of packaging, protobuf and rich below what Cairn's own dependencies
install, so it cannot live in Cairn's venv: the test makes a venv of its own for it once
(`.venv/flwr`, or `$CAIRN_FLWR_VENV`; about 45 s, then cached) and runs Flower's strategies
there, on arrays written to a file, round after round.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cairn.worker.workflows import Update, make_workflow

ROOT = Path(__file__).resolve().parents[2]
FLWR = "flwr==1.42.0"
ROUNDS, CLIENTS = 3, 5
PARAMS = {"fedprox": {"mu": 0.1}, "fedadam": {"server_lr": 0.1, "beta_1": 0.9, "beta_2": 0.99,
                                              "tau": 1e-9},
          "fedyogi": {"server_lr": 0.01, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-3},
          "fedadagrad": {"server_lr": 0.1, "tau": 1e-9},
          "fedavgm": {"server_lr": 1.0, "momentum": 0.9}, "trimmed-mean": {"beta": 0.2}}
NAMES = ["fedavg", "fedprox", "fedadam", "fedyogi", "fedadagrad", "fedavgm", "median",
         "trimmed-mean"]


def _flower_python() -> Path:
    venv = Path(os.environ.get("CAIRN_FLWR_VENV") or ROOT / ".venv" / "flwr")
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".flwr.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes build it once
        ready = venv / ".ready"
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            done = subprocess.run([str(python), "-m", "pip", "install", "-q",
                                   "--disable-pip-version-check", FLWR, "numpy"],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                pytest.fail(f"cannot install {FLWR} into {venv}: {done.stderr[-2000:]}")
            ready.touch()
    return python


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray],
                                                              dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    shapes = [(4, 3), (3,), (2, 2, 2)]
    data: dict[str, np.ndarray] = {f"initial_{i}": rng.normal(size=s)
                                   for i, s in enumerate(shapes)}
    for r in range(1, ROUNDS + 1):
        for c in range(CLIENTS):
            data[f"n_{r}_{c}"] = np.array(int(rng.integers(10, 500)))
            for i, s in enumerate(shapes):
                data[f"w_{r}_{c}_{i}"] = rng.normal(loc=0.3 * c, size=s)
    folder = tmp_path_factory.mktemp("flower")
    src, dst = folder / "in.npz", folder / "out.npz"
    np.savez(src, **data)
    subprocess.run([str(_flower_python()), str(ROOT / "tests/unit/flower/reference.py"),
                    str(src), str(dst)], check=True, timeout=300)
    with np.load(dst) as out:
        return data, dict(out)


@pytest.mark.parametrize("name", NAMES)
def test_aggregation_equals_flowers(name: str, flower: tuple[dict[str, np.ndarray],
                                                             dict[str, np.ndarray]]) -> None:
    data, expected = flower
    leaves = sorted(int(k.split("_")[1]) for k in data if k.startswith("initial_"))
    model = {f"p{i}": data[f"initial_{i}"] for i in leaves}
    workflow = make_workflow(name, PARAMS.get(name, {}))
    for r in range(1, ROUNDS + 1):
        updates = [Update(site=f"s{c}", n=float(data[f"n_{r}_{c}"]),
                          weights={f"p{i}": data[f"w_{r}_{c}_{i}"] for i in leaves})
                   for c in range(CLIENTS)]
        model = workflow.aggregate(r, model, updates)
        for i in leaves:
            np.testing.assert_allclose(model[f"p{i}"], expected[f"{name}_{r}_{i}"],
                                       rtol=0, atol=1e-6, err_msg=f"{name} round {r} p{i}")
