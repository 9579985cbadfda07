"""`cairn sim` runs a job on simulated sites as a real federation: FedAvg on 4 sites, 2 to
a process (the grouped parents of large simulations), secure; its job is a normal job in a
normal stream (`cairn job show` and `cairn replay` read it while `--keep` holds it up)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cairn.errors import InvalidInput
from cairn.runtime.sim import SimReport, simulate
from tests.cli_runner import cairn

REPO = Path(__file__).resolve().parents[2]
FEDAVG = REPO / "examples" / "fedavg"

pytestmark = pytest.mark.slow


def test_sim_fedavg_four_sites_is_a_normal_job(tmp_path: Path) -> None:
    seen: dict[str, tuple[int, str, str]] = {}
    lines: list[str] = []

    def while_up(report: SimReport) -> None:
        assert report.context is not None
        env: dict[str, str | None] = {"CAIRN_CONTEXT": report.context, "CAIRN_NATS_URL": None,
                                      "CAIRN_CREDS": None, "CAIRN_TLS_CA": None,
                                      "CAIRN_STUDY": None}
        seen["show"] = cairn("job", "show", report.job, "-o", "json", env=env)
        seen["replay"] = cairn("replay", "--job", report.job, "-o", "json", env=env)

    report = simulate(
        FEDAVG / "job.yaml", 4, tmp_path / "sim", sites_per_process=2, keep=while_up,
        setup=f"{sys.executable} {FEDAVG / 'setup_data.py'} --sites-dir {{sites_dir}}",
        sets=["params.rounds=3"], say=lines.append)
    assert report.state == "completed", (report, lines)
    assert report.secure and report.sites == 4 and len(report.round_s) == 3
    assert report.peak_pss_bytes > 0 and report.peak_processes > 4
    # Four sites in two parents (plus the hub's), every site its own identity.
    plans = sorted(p.name for p in (tmp_path / "sim" / "plans").iterdir())
    assert plans == ["sites-1.json", "sites-2.json"]
    assert any("services healthy" in line for line in lines)
    assert any("server round 3: 4 sites" in line for line in lines), lines

    code, out, err = seen["show"]
    assert code == 0, err
    import json

    job = json.loads(out)
    assert job["state"] == "completed"
    clients = sorted(w["site"] for w in job["workers"].values() if w["role"] == "client")
    assert clients == [f"site-{i}" for i in range(1, 5)]
    [server] = [r["value"] for r in job["results"] if r["role"] == "server"]
    assert [r["sites"] for r in server["rounds"]] == [clients] * 3
    code, out, err = seen["replay"]
    assert code == 0 and report.job in out, err


def test_sim_refuses_a_role_naming_sites_it_does_not_have(tmp_path: Path) -> None:
    folder = tmp_path / "sim"
    with pytest.raises(InvalidInput, match=r"role full names site-a.*site-1 \.\.\. site-2"):
        simulate(REPO / "examples" / "flare-numpy" / "job.yaml", 2, folder)
    assert not folder.exists()  # refused before anything was made
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(InvalidInput, match="not a cairn sim folder"):
        simulate(FEDAVG / "job.yaml", 2, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").exists()
