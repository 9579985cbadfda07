"""Cairn's recipe checks: the result line, combining ranks, and each check's parsing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cairn.checks import (
    MODULES,
    CheckReport,
    accelerator_discovery,
    combine,
    container_gpu_access,
    cpu_smoke,
    format_line,
    gang_start,
    k8s_device_plugin,
    nccl_all_reduce_bw,
    parse_lines,
    run_check,
    slurm_gres,
)
from cairn.recipes import load_catalog


def test_every_catalog_check_is_implemented_and_nothing_else() -> None:
    assert set(MODULES) == set(load_catalog().checks)


def test_a_report_line_round_trips_among_other_output() -> None:
    report = CheckReport(check="cpu-smoke", status="passed", readings={"cpu-smoke-seconds": 0.1},
                         rank=1, started_at=1.5)
    log = f"noise\n{format_line(report)}\nCAIRN-CHECK {{broken\nCAIRN-CHECKS x\n"
    assert parse_lines(log) == [report]


def test_a_check_that_raises_reports_error_and_an_unknown_one_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(params: object) -> CheckReport:
        raise RuntimeError("driver fell over")

    monkeypatch.setattr(cpu_smoke, "run", boom)
    report = run_check("cpu-smoke", {})
    assert report.status == "error" and "driver fell over" in report.message
    assert run_check("no-such", {}).status == "error"


def test_cpu_smoke_knows_its_answer() -> None:
    report = run_check("cpu-smoke", {"with": {"rounds": 1000}})
    assert report.status == "passed" and report.readings["cpu-smoke-seconds"] >= 0
    assert cpu_smoke.chain(100_000) == cpu_smoke.EXPECTED[100_000]


def test_runnable_as_a_module_with_params() -> None:
    proc = subprocess.run([sys.executable, "-m", "cairn.checks", "cpu-smoke", "--params",
                           '{"with": {"rounds": 10}}'], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    (report,) = parse_lines(proc.stdout)
    assert report.check == "cpu-smoke" and report.status == "passed"
    assert report.started_at > 0


@pytest.mark.parametrize(("physical", "env", "seen"), [
    (8, None, 8), (8, "", 0), (8, "0,1", 2), (2, "0,5,1", 1), (0, "0", 0), (4, "GPU-abc", 1),
])
def test_visible_gpus_follow_cuda_visible_devices(physical: int, env: str | None,
                                                  seen: int) -> None:
    assert accelerator_discovery.visible(physical, env) == seen


def test_accelerator_discovery_compares_with_what_the_site_declares(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accelerator_discovery, "physical_gpus", lambda: (8, "nvml"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    report = run_check("accelerator-discovery", {"expected_gpus": 8})
    assert report.status == "failed" and report.readings == {"accelerator-count": 4}
    assert run_check("accelerator-discovery", {"expected_gpus": 4}).status == "passed"


def _gang(*starts: float) -> list[CheckReport]:
    return [CheckReport(check="gang-start", status="passed", rank=i, started_at=t)
            for i, t in enumerate(starts)]


def test_gang_start_passes_within_the_window_and_fails_outside_or_short() -> None:
    ok = combine("gang-start", _gang(100.0, 100.4), {"ranks": 2})
    assert ok.status == "passed" and ok.readings == {"gang-start-seconds": 0.4}
    late = combine("gang-start", _gang(100.0, 160.0), {"ranks": 2, "with": {"window_s": 30}})
    assert late.status == "failed" and "window" in late.message
    short = gang_start.combine(_gang(100.0), {"ranks": 3})
    assert short.status == "failed" and "missing: 1, 2" in short.message


def test_combine_takes_the_worst_rank_and_counts_silent_ranks() -> None:
    ranks = [CheckReport(check="x", status="passed"), CheckReport(check="x", status="failed")]
    assert combine("cpu-smoke", ranks, {"ranks": 2}).status == "failed"
    assert combine("cpu-smoke", ranks[:1], {"ranks": 2}).status == "error"
    assert combine("cpu-smoke", [], {}).status == "error"


# all_reduce_perf output (nccl-tests 2.13), runs of spaces squeezed to fit the line length.
NCCL = """\
# nThread 1 nGpus 8 minBytes 1024 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20
#
# out-of-place in-place
# size count type redop root time algbw busbw #wrong time algbw busbw #wrong
# (B) (elements) (us) (GB/s) (GB/s) (us) (GB/s) (GB/s)
 1024 256 float sum -1 28.50 0.04 0.06 0 27.84 0.04 0.06 0
 8589934592 2147483648 float sum -1 38561 222.76 389.84 0 38502 223.10 390.43 0
 17179869184 4294967296 float sum -1 76935 223.30 390.77 0 76900 223.40 390.95 0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 123.456
"""


def test_nccl_output_gives_peak_and_average_bus_bandwidth() -> None:
    parsed = nccl_all_reduce_bw.parse_output(NCCL)
    assert parsed == {"peak_busbw": 390.95, "avg_busbw": 123.456, "rows": 3, "wrong": 0}
    assert nccl_all_reduce_bw.parse_output("garbage")["rows"] == 0


def test_tool_outputs_parse() -> None:
    assert container_gpu_access.count_gpus(
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n") == 2
    assert slurm_gres.gres_by_node("n1 gpu:h100:8(S:0-1)\nn2 (null)\nn1 gpu:h100:8\n") == {
        "n1": 8, "n2": 0}
    nodes = {"items": [{"metadata": {"name": "a"}, "status": {"allocatable": {
        "nvidia.com/gpu": "8"}}}, {"metadata": {"name": "b"}, "status": {"allocatable": {}}}]}
    assert k8s_device_plugin.allocatable(nodes) == {"a": 8, "b": 0}


def test_platform_checks_skip_with_a_reason_where_their_platform_is_absent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(slurm_gres, "_configured", lambda: False)
    for name, why in (("k8s-device-plugin", "Kubernetes"), ("slurm-gres", "Slurm"),
                      ("container-gpu-access", "docker"), ("nccl-all-reduce-bw", "PATH")):
        report = run_check(name, {})
        assert report.status == "skipped" and why in report.message, report
