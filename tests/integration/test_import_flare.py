"""`cairn job import-flare`: FLARE job folders exported with FLARE's own Job API
(tests/data/flare/jobs, written by tests/data/flare/export_jobs.py with PyPI nvflare) become
Cairn job folders that run, and what cannot be mapped is named, file and place.

The FedAvg job's two trainers (FULL and DIFF updates, weighed 1 and 3) run on `cairn sim`'s
site-1 and site-2, the sites FLARE deployed them to; the aggregated model after 3 rounds is
known in advance. The export is checked against nvflare itself where tools/flare_venv.py
made its venv (CI makes it: .ci/run).
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cairn.runtime.sim import simulate
from tests.cli_runner import cairn

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "flare"
JOBS = DATA / "jobs"
sys.path.insert(0, str(REPO / "tools"))
import flare_venv  # noqa: E402

pytestmark = pytest.mark.slow
INITIAL = np.arange(1.0, 10.0).reshape(3, 3)
STEP = (1.0 * 1 + 2.0 * 3) / (1 + 3)


def test_imported_fedavg_job_completes_on_the_sites_flare_named(tmp_path: Path) -> None:
    out = tmp_path / "hello"
    code, stdout, stderr = cairn("job", "import-flare", str(JOBS / "hello-numpy"), "--out",
                                 str(out), "-o", "json")
    assert code == 0, stderr
    done = json.loads(stdout)
    assert done["unmapped"] == [] and done["job"] == "hello-numpy"
    assert (out / "app" / "app_site-2" / "client.py").read_text() == (
        REPO / "examples" / "flare-numpy" / "app" / "client.py").read_text()
    lines: list[str] = []
    report = simulate(out / "job.yaml", 2, tmp_path / "sim", say=lines.append)
    assert report.state == "completed", (report, lines)
    assert len(report.round_s) == 3
    server = report.results["server@hub"]
    assert [r["sites"] for r in server["rounds"]] == [["site-1", "site-2"]] * 3
    np.testing.assert_allclose(server["model"]["numpy_key"], INITIAL + 3 * STEP)


def test_imported_scatter_and_gather_reads_the_persistor(tmp_path: Path) -> None:
    out = tmp_path / "sag"
    code, _, stderr = cairn("job", "import-flare", str(JOBS / "hello-numpy-sag"), "--out",
                            str(out))
    assert code == 0, stderr
    import yaml

    spec = yaml.safe_load((out / "job.yaml").read_text())
    assert spec["params"] == {"rounds": 2, "min_sites": 2, "round_timeout": 60,
                              "initial_model": {"numpy_key": INITIAL.astype(int).tolist()}}
    assert spec["roles"]["client"] == {
        "api": "flare", "entrypoint": "python app/client.py --update_type full",
        "resources": {"cpus": 1, "memory": "1Gi"}, "sites": "all", "min_sites": 2}


def test_what_cannot_be_mapped_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    job = tmp_path / "flare"
    shutil.copytree(JOBS / "hello-numpy", job)
    server = job / "app_server" / "config" / "config_fed_server.json"
    doc = json.loads(server.read_text())
    doc["workflows"].append({"id": "eval", "path": "nvflare.app_common.workflows."
                             "cross_site_model_eval.CrossSiteModelEval", "args": {}})
    doc["task_result_filters"] = [{"tasks": ["train"], "filters": [{
        "path": "nvflare.app_common.filters.percentile_privacy.PercentilePrivacy"}]}]
    server.write_text(json.dumps(doc))
    out = tmp_path / "out"
    code, _, stderr = cairn("job", "import-flare", str(job), "--out", str(out))
    assert code == 3, stderr
    assert "CrossSiteModelEval" in stderr and "workflows[1] (eval)" in stderr
    assert "PercentilePrivacy" in stderr and "task_result_filters[0].filters[0]" in stderr
    assert "2 FLARE component(s)" in stderr and "Traceback" not in stderr
    assert not out.exists()
    code, _, stderr = cairn("job", "import-flare", str(job), "--out", str(out), "--force")
    assert code == 0, stderr
    assert "Not mapped: nvflare.app_common.workflows.cross_site_model_eval" in (
        out / "job.yaml").read_text()


@pytest.mark.parametrize("damage", ["meta", "executor", "hocon"])
def test_a_broken_flare_folder_is_one_line_naming_the_file(tmp_path: Path,
                                                          damage: str) -> None:
    job = tmp_path / "flare"
    shutil.copytree(JOBS / "hello-numpy", job)
    client = job / "app_site-1" / "config" / "config_fed_client.json"
    if damage == "meta":
        (job / "meta.json").write_text("{not json")
        named = "meta.json"
    elif damage == "executor":
        doc = json.loads(client.read_text())
        doc["executors"][0]["executor"]["args"]["task_script_path"] = "missing.py"
        client.write_text(json.dumps(doc))
        named = "config_fed_client.json"
    else:
        client.rename(client.with_suffix(".conf"))
        named = "config_fed_client.conf"
    code, _, stderr = cairn("job", "import-flare", str(job), "--out", str(tmp_path / "o"))
    assert code == 3 and named in stderr and "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1


def test_the_committed_folders_are_what_flare_exports(tmp_path: Path) -> None:
    python = flare_venv.python()
    if python is None:
        pytest.skip("no nvflare venv: python tools/flare_venv.py makes it (CI does)")
    subprocess.run([str(python), str(DATA / "export_jobs.py"), str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    for job in ("hello-numpy", "hello-numpy-diff", "hello-numpy-sag"):
        cmp = filecmp.dircmp(JOBS / job, tmp_path / job)
        assert _same(cmp), f"{job}: re-export differs; run tests/data/flare/export_jobs.py"


def _same(cmp: filecmp.dircmp[str]) -> bool:
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(_same(sub) for sub in cmp.subdirs.values())


@pytest.mark.parametrize("change", [
    ("meta.json", lambda d: d["deploy_map"].update({"app_server": "server"})),
    ("meta.json", lambda d: d["deploy_map"].update({"../../etc": ["server"]})),
    ("app_server/config/config_fed_server.json",
     lambda d: d["workflows"][0]["args"].update({"num_rounds": "three"})),
    ("app_site-1/config/config_fed_client.json",
     lambda d: d["executors"].__setitem__(0, {"tasks": ["*"], "executor": ["not", "a", "map"]})),
    ("app_site-1/config/config_fed_client.json", lambda d: d.update({"components": {"x": 1}})),
])
def test_wrong_shapes_are_one_line_naming_the_file(tmp_path: Path, change: Any) -> None:
    job = tmp_path / "flare"
    shutil.copytree(JOBS / "hello-numpy", job)
    name, edit = change
    doc = json.loads((job / name).read_text())
    edit(doc)
    (job / name).write_text(json.dumps(doc))
    code, _, stderr = cairn("job", "import-flare", str(job), "--out", str(tmp_path / "o"))
    assert code == 3 and Path(name).name in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "o").exists()
