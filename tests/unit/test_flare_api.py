"""The FLARE Client API layer's pure parts: the job spec's `api: flare`, DIFF updates made
whole, metrics, and `nvflare` existing only where a worker's runner puts it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cairn.errors import InvalidInput
from cairn.flare import client
from cairn.flare.model import FLModel, ParamsType, params_type_of
from cairn.spec.job import parse_job_spec

SPEC = """\
name: t
code: ./app
roles:
  client:
    api: flare
    entrypoint: {entrypoint}
"""


def _spec(tmp_path: Path, entrypoint: str) -> str:
    (tmp_path / "app").mkdir(exist_ok=True)
    spec = parse_job_spec(SPEC.format(entrypoint=entrypoint), "job.yaml", tmp_path)
    return spec.roles["client"].entrypoint


def test_api_flare_runs_the_trainer_under_the_flare_runner(tmp_path: Path) -> None:
    assert _spec(tmp_path, "python train.py --update_type diff") == (
        "python -m cairn.flare.run train.py --update_type diff")
    assert _spec(tmp_path, "python3 -m trainer.main 'a b'") == (
        "python -m cairn.flare.run -m trainer.main 'a b'")


@pytest.mark.parametrize("entrypoint", ["bash run.sh", "python", "python -u train.py",
                                        "python -m"])
def test_api_flare_refuses_what_is_not_a_python_trainer(tmp_path: Path,
                                                       entrypoint: str) -> None:
    with pytest.raises(InvalidInput, match=r"api: flare runs a Python trainer") as info:
        _spec(tmp_path, entrypoint)
    assert "job.yaml" in str(info.value) and "entrypoint" in str(info.value)


def test_api_is_cairn_or_flare(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    with pytest.raises(InvalidInput, match="api"):
        parse_job_spec(SPEC.replace("api: flare", "api: flower").format(
            entrypoint="python x.py"), "job.yaml", tmp_path)


def test_a_diff_is_added_to_the_model_it_answers() -> None:
    received = {"w": np.ones(3), "b": np.zeros(1)}
    diff = FLModel(params={"w": np.full(3, 0.5)}, params_type=ParamsType.DIFF)
    whole = client.full_params(diff, received)
    np.testing.assert_array_equal(whole["w"], np.full(3, 1.5))
    np.testing.assert_array_equal(whole["b"], np.zeros(1))  # left out: kept as received
    # A first round without an initial model: the diff is the change from zero.
    np.testing.assert_array_equal(client.full_params(diff, {})["w"], np.full(3, 0.5))
    full = FLModel(params={"w": np.zeros(3)}, params_type="full")
    np.testing.assert_array_equal(client.full_params(full, received)["w"], np.zeros(3))


def test_empty_params_and_unknown_params_types_are_refused() -> None:
    with pytest.raises(client.FlareAPIError, match="params is empty"):
        client.full_params(FLModel(params={}), {})
    with pytest.raises(ValueError, match=r"use ParamsType\.FULL or ParamsType\.DIFF"):
        params_type_of(FLModel(params={"w": 1}, params_type="PARTIAL"))


def test_only_numeric_metrics_are_published() -> None:
    assert client.numeric_metrics({"acc": np.float32(0.5), "n": 3, "note": "x",
                                   "arr": [1]}) == {"acc": 0.5, "n": 3.0}


def test_init_outside_a_worker_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CAIRN_NATS_URL", "CAIRN_STUDY", "CAIRN_JOB", "CAIRN_SITE", "CAIRN_ROLE",
                 "CAIRN_ALLOCATION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(client.FlareAPIError, match="only inside a Cairn worker"):
        client.init()


def test_nvflare_is_importable_only_under_the_runner(tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, "-c", "import nvflare"], capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode != 0 and "No module named 'nvflare'" in plain.stderr
    script = tmp_path / "probe.py"
    script.write_text("import sys, nvflare.client as flare\n"
                      "from nvflare.app_common.np.constants import NPConstants\n"
                      "from nvflare.client.tracking import SummaryWriter\n"
                      "print(flare.FLModel.__module__, NPConstants.NUMPY_KEY, sys.argv[1:])\n")
    ran = subprocess.run([sys.executable, "-m", "cairn.flare.run", str(script), "--x", "1"],
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["cairn.flare.model", "numpy_key", "['--x',", "'1']"]
    missing = subprocess.run([sys.executable, "-m", "cairn.flare.run", "nope.py"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.py: no such script" in missing.stderr


def test_the_flare_servers_initial_model_comes_from_params() -> None:
    from cairn.flare.server import initial_model

    model = initial_model({"initial_model": {"numpy_key": [[1, 2], [3, 4]]}})
    np.testing.assert_array_equal(model["numpy_key"], np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert initial_model({}) == {}  # FLARE sends an empty model when it has none
    with pytest.raises(InvalidInput, match=r"initial_model\.w: not an array of numbers"):
        initial_model({"initial_model": {"w": [[1, 2], [3]]}})
    with pytest.raises(InvalidInput, match="must map parameter names to arrays"):
        initial_model({"initial_model": [1, 2]})
