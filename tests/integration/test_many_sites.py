"""One real coordinator driven by many simulated sites (`cairn sim-sites`), secure.

CI runs 60 sites (the suite's time budget); `make scale-check` runs 200, 1,000 and 10,000
(marker `scale`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cairn import subjects
from cairn.events import WorkerExited, encode
from cairn.runtime.manysites import ManySitesReport, SimulatedFederation, run_many_sites
from tests.integration.security_helpers import connect_as, js_allowed


def _exited(site: str) -> bytes:
    return encode(WorkerExited(id=f"probe-{site}", at="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
                               study="demo", source=f"launcher@{site}", job="j-probe",
                               site=site, role="work", launch_id=f"j-probe/{site}/work/0/0",
                               exit_code=0))


async def _site_rights(fed: SimulatedFederation, seen: dict[str, bool]) -> None:
    """A simulated site's credential may write its own site's job events, not another's."""
    assert fed.trust is not None
    probe = await connect_as(fed, fed.trust.creds("site-1"))
    try:
        for name, site in (("own", "site-1"), ("other", "site-2")):
            subject = subjects.job_site("demo", "j-probe", site, "exited")
            seen[name] = await js_allowed(probe, subject, _exited(site))
    finally:
        await probe.close()


def _run(tmp_path: Path, sites: int, jobs: int, backlog: int, *, worker_reports: bool,
         per_process: int = 250) -> tuple[ManySitesReport, dict[str, bool]]:
    seen: dict[str, bool] = {}

    async def check(fed: SimulatedFederation) -> None:
        await _site_rights(fed, seen)

    report = run_many_sites(tmp_path / "fed", sites, jobs, backlog=backlog,
                            worker_reports=worker_reports, sites_per_process=per_process,
                            timeout=900.0, check=check,
                            say=lambda line: print(line, flush=True))
    print(json.dumps({**report.as_dict(), "not_completed": len(report.not_completed)}))
    return report, seen


@pytest.mark.timeout(300)
def test_sixty_simulated_sites_complete_their_jobs_and_the_state_equals_the_replay(
        tmp_path: Path) -> None:
    report, seen = _run(tmp_path, 60, 40, 40, worker_reports=True, per_process=60)
    assert seen == {"own": True, "other": False}
    assert report.not_completed == {}
    assert report.completed == 80
    assert report.with_results == 80  # every fake worker reported on its own credential
    assert report.state_equals_replay


@pytest.mark.scale
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("sites", [200, 1000, 10000])
def test_many_simulated_sites_at_scale(tmp_path: Path, sites: int) -> None:
    backlog = int(os.environ.get("CAIRN_SCALE_BACKLOG", "2000"))
    # One process of up to 1,000 sites: it starts 8 at a time, which a loaded machine's
    # JetStream API keeps up with (four processes of 250 at once did not, on 2 cores).
    report, seen = _run(tmp_path, sites, 500, backlog, worker_reports=False, per_process=1000)
    assert seen == {"own": True, "other": False}
    assert report.not_completed == {} and report.completed == backlog + 500
    assert report.state_equals_replay
