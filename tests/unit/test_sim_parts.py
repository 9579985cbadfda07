"""`cairn sim`'s pure parts: the sites it simulates, the jobs it refuses before starting
anything, how sites are cut into parents, and the memory it measures (this process's own
tree, read from /proc)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.errors import InvalidInput
from cairn.runtime.procmem import PeakMemory, descendants, usage
from cairn.runtime.sim import check_job, prepare_dir, sim_sites
from cairn.runtime.sites import load_plan, parent_plans, write_plan
from cairn.spec.job import parse_job_spec

JOB = """\
name: t
code: ./app
roles:
  server: {entrypoint: python s.py}
  client: {entrypoint: python c.py, sites: SITES, min_sites: MIN}
"""


def _spec(tmp_path: Path, sites: str, min_sites: int) -> object:
    (tmp_path / "app").mkdir(exist_ok=True)
    text = JOB.replace("SITES", sites).replace("MIN", str(min_sites))
    return parse_job_spec(text, "job.yaml", tmp_path)


def test_sites_are_named_as_flares_simulator_names_them() -> None:
    assert sim_sites(3) == ("hub", "site-1", "site-2", "site-3")


def test_a_job_naming_other_sites_or_too_many_is_refused(tmp_path: Path) -> None:
    check_job(_spec(tmp_path, "all", 3), sim_sites(3), "job.yaml")  # type: ignore[arg-type]
    check_job(_spec(tmp_path, "[site-2]", 1), sim_sites(3), "job.yaml")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"roles\.client\.sites.*names site-a"):
        check_job(_spec(tmp_path, "[site-a]", 1), sim_sites(3), "job.yaml")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"min_sites 5 but runs at 3"):
        check_job(_spec(tmp_path, "all", 5), sim_sites(3), "job.yaml")  # type: ignore[arg-type]


def test_sites_are_cut_into_parents_each_site_with_its_own_credential(tmp_path: Path) -> None:
    class Kits:
        ca = Path("/t/ca.pem")

        def creds(self, name: str) -> Path:
            return Path(f"/t/{name}.creds")

    sites = [f"site-{i}" for i in range(1, 8)]
    plans = parent_plans(sites, 3, lambda s: tmp_path / s / "site.yaml",
                         services=["agent", "launcher"], nats_url="tls://127.0.0.1:1",
                         trust=Kits(), heartbeat_s=1.0, options={})  # type: ignore[arg-type]
    assert [[s.site for s in p.sites] for p in plans] == [sites[0:3], sites[3:6], sites[6:]]
    assert plans[1].sites[0].creds == "/t/site-4.creds"
    again = load_plan(str(write_plan(tmp_path / "p.json", plans[0])))
    assert again == plans[0]
    (tmp_path / "bad.json").write_text('{"services": ["agent"], "sites": [{"site": 1}]}')
    with pytest.raises(InvalidInput, match=r"bad\.json"):
        load_plan(str(tmp_path / "bad.json"))


def test_a_folder_not_made_by_sim_is_never_cleared(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("mine")
    with pytest.raises(InvalidInput, match="not a cairn sim folder"):
        prepare_dir(tmp_path)
    assert (tmp_path / "x.txt").read_text() == "mine"
    sim = tmp_path / "sim"
    prepare_dir(sim)
    (sim / "old").write_text("from the last run")
    prepare_dir(sim)  # one made by sim is cleared
    assert not (sim / "old").exists() and (sim / "sim.json").exists()


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")
def test_peak_memory_counts_the_children_too() -> None:
    alone = usage(descendants([os.getpid()]))
    with subprocess.Popen([sys.executable, "-c", "import sys; b = bytearray(64 << 20); "
                           "print(1, flush=True); sys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == b"1"
            with PeakMemory(lambda: []) as peak:
                peak.sample()
            assert child.pid in descendants([os.getpid()])
            assert peak.peak.processes >= alone.processes + 1
            assert peak.peak.pss_bytes >= alone.pss_bytes + (60 << 20)
        finally:
            child.kill()
