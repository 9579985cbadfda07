"""Validation end to end: `cairn validate` against an embedded federation, whose check jobs run
through the sites' launchers under the reserved study `validation`.

One federation serves the whole module (each test validates a different site), so the file
stays fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn import events as ev
from cairn import subjects
from cairn.bus import replay
from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
from tests.fixtures.federation import make_federation, started
from tests.integration.cp_helpers import study_events


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("validation"))) as federation:
        yield federation


async def cairn(fed: EmbeddedFederation, *args: str) -> tuple[int, str, str]:
    """Run the `cairn` command against the federation; (exit code, stdout, stderr)."""
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, "CAIRN_ACTOR": DEFAULT_ADMIN,
           **fed.client_env(),
           "COLUMNS": "400"}  # wide enough that rich never wraps a remediation
    env.pop("CAIRN_CONTEXT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn", *args, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def federation_events(fed: EmbeddedFederation, subject: str) -> list[Any]:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        return [r.event async for r in replay(bus, subjects.FEDERATION_STREAM.name,
                                              ev.FEDERATION_DECODER, filters=[subject])
                if r.event is not None]
    finally:
        await bus.close()


def ctrf_tests(result: dict[str, Any], phase: str, kind: str | None = None
               ) -> dict[str, dict[str, Any]]:
    """A phase's CTRF tests by name (a check and a constraint may share one: pass `kind`)."""
    tests = result["phases"][phase]["ctrf"]["results"]["tests"]
    return {t["name"]: t for t in tests if kind is None or t["type"] == kind}


async def test_cpu_site_passes_a_cpu_recipe_with_checks_run_as_jobs(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = await cairn(fed, "validate", "--site", "site-a", "--recipe",
                                       "cpu-linux-process", "-o", "json", "--out", str(out))
    assert code == 0, stderr + stdout
    result = json.loads(stdout)
    assert result["status"] == "passed" and list(result["phases"]) == ["readiness"]
    tests = ctrf_tests(result, "readiness")
    assert {"accelerator-discovery", "cpu-smoke", "accelerator-count", "OS.release.ID",
            "Memory.info.total-bytes"} <= set(tests)
    assert all(t["status"] == "passed" for t in tests.values()), tests
    assert tests["accelerator-discovery"]["extra"]["readings"] == {"accelerator-count": 0}
    assert tests["cpu-smoke"]["extra"]["readings"]["cpu-smoke-seconds"] > 0
    summary = result["phases"]["readiness"]["ctrf"]["results"]["summary"]
    assert summary["tests"] == len(tests) and summary["failed"] == summary["skipped"] == 0
    # The checks really ran as jobs through site-a's launcher, in the reserved study.
    jobs = {tests[c]["extra"]["job"] for c in ("accelerator-discovery", "cpu-smoke")}
    launching = [e for e in await study_events(fed, study="validation")
                 if isinstance(e, ev.WorkerLaunching) and e.job in jobs]
    assert {(e.site, e.backend) for e in launching} == {("site-a", "process")}
    assert {e.job for e in launching} == jobs
    # Events: started, one phase with its CTRF, completed; and a fresh snapshot was asked for.
    run = [e for e in await federation_events(fed, subjects.validation_all("site-a",
                                                                           "cpu-linux-process"))
           if e.run == result["run"]]
    assert [type(e).__name__ for e in run] == ["ValidationStarted", "ValidationPhase",
                                               "ValidationCompleted"]
    assert run[1].ctrf["results"]["tool"] == {"name": "cairn"} and run[2].status == "passed"
    # The start snapshot comes a moment after the site starts, so a quick validation can end
    # before it: wait for it (bounded) rather than assume an order.
    deadline = time.monotonic() + 30
    while True:
        snaps = await federation_events(fed, subjects.site_event("site-a", "snapshot"))
        if {s.reason for s in snaps} >= {"start", "request"} or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert {s.reason for s in snaps} >= {"start", "request"}
    assert run[0].snapshot_digest in {s.digest for s in snaps}
    # --out holds what an evidence bundle needs.
    assert json.loads((out / "ctrf" / "readiness.json").read_text())["reportFormat"] == "CTRF"
    assert json.loads((out / "snapshot.json").read_text())["digest"] == run[0].snapshot_digest
    assert "cpu-linux-process" in (out / "recipe.resolved.yaml").read_text()
    assert json.loads((out / "result.json").read_text())["status"] == "passed"


async def test_gpu_recipe_fails_on_a_cpu_site_naming_constraints_and_remediations(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, stderr = await cairn(fed, "validate", "--site", "site-b", "--recipe",
                                       "slurm-h100", "--out", str(out))
    assert code == 1, stderr + stdout
    result = json.loads((out / "result.json").read_text())
    phases = {p: v["status"] for p, v in result["phases"].items()}
    assert phases == {"readiness": "failed", "deployment": "failed", "conformance": "passed",
                      "performance": "failed"}
    # Missing GPU readings fail (missing data is not a pass), each with its remediation.
    readiness = ctrf_tests(result, "readiness")
    for name in ("GPU.smi.driver", "GPU.smi.cuda-version", "GPU.hardware.gpu-count",
                 "GPU.hardware.model", "Slurm.cluster.version"):
        assert readiness[name]["status"] == "failed", name
        assert readiness[name]["rawStatus"] == "missing", name
        remediation = readiness[name]["extra"]["remediation"]
        line = next(li for li in stdout.splitlines() if f" {name} " in li)
        assert remediation[:30] in line, (name, line)
    assert readiness["accelerator-count"]["rawStatus"] == "failed"  # the job saw 0 GPUs
    assert "The scheduler must be able to hand GPUs" in stdout
    # GPU checks are skipped on a site without GPUs, and a skipped check fails its phase.
    deployment = ctrf_tests(result, "deployment", "check")
    assert deployment["slurm-gres"]["status"] == "skipped"
    assert "declares none" in deployment["slurm-gres"]["message"]
    performance = ctrf_tests(result, "performance", "check")
    assert performance["gpu-matmul"]["status"] == "skipped"
    assert performance["nccl-all-reduce-bw"]["status"] == "skipped"
    assert any("gpu-matmul: skipped" in r for r in result["phases"]["performance"]["reasons"])
    floor = ctrf_tests(result, "performance", "constraint")["gpu-matmul"]
    assert floor["rawStatus"] == "missing" and floor["status"] == "failed"
    # gang-start ran as two workers of one job on site-b and both started in the window.
    gang = ctrf_tests(result, "conformance", "check")["gang-start"]
    assert gang["status"] == "passed" and gang["extra"]["details"]["ranks"] == 2
    launching = [e for e in await study_events(fed, study="validation")
                 if isinstance(e, ev.WorkerLaunching) and e.job == gang["extra"]["job"]]
    assert sorted(e.role for e in launching) == ["rank-0", "rank-1"]
    assert {e.site for e in launching} == {"site-b"}
    assert "site-b against slurm-h100: failed" in stdout


async def test_unknown_recipe_or_site_is_an_error_not_a_run(fed: EmbeddedFederation) -> None:
    code, _, stderr = await cairn(fed, "validate", "--site", "site-a", "--recipe", "no-such")
    assert code == 4 and "no-such" in stderr
    code, _, stderr = await cairn(fed, "validate", "--site", "nowhere", "--recipe",
                                  "cpu-linux-process")
    assert code == 4 and "nowhere" in stderr
    code, _, stderr = await cairn(fed, "validate", "--site", "Bad.Site", "--recipe", "x")
    assert code == 3
