"""The worker's allocation check (cairn.worker.allocation): what it decides from what a worker
can see, with NVML faked at its Python boundary (no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.worker import allocation as al

UUIDS = ("GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-cccc-3333", "GPU-dddd-4444")


def seen(env: dict[str, str], uuids: tuple[str, ...] | None = None) -> al.Seen:
    return al.observe(env, nvml=lambda: uuids)


def decide(allocation: str, env: dict[str, str],
           uuids: tuple[str, ...] | None = None) -> al.Report:
    return al.compare(al.parse(allocation), seen(env, uuids))


def test_encode_and_parse_round_trip() -> None:
    text = al.encode(2, ["0", "3"], [4, 5], 1 << 30)
    assert text == "gpus=2;gpu_ids=0,3;cpus=4,5;memory=1073741824"
    assert al.parse(text) == al.Allocation(gpus=2, gpu_ids=("0", "3"), cpus=(4, 5),
                                           memory_bytes=1 << 30)
    assert al.parse("") == al.Allocation()
    with pytest.raises(ValueError, match="gpus=, gpu_ids="):
        al.parse("gpu=1")
    with pytest.raises(ValueError, match="not a number"):
        al.parse("gpus=two")


def test_the_normal_cases_pass() -> None:
    assert decide(al.encode(0), {"CUDA_VISIBLE_DEVICES": ""}, UUIDS).ok
    assert decide(al.encode(1, ["2"]), {"CUDA_VISIBLE_DEVICES": "2"}, UUIDS).ok
    assert decide(al.encode(1, ["2"]), {"CUDA_VISIBLE_DEVICES": "2"}, None).ok  # no NVML
    # A container that sees only its GPUs (CUDA_VISIBLE_DEVICES unset), named by UUID.
    assert decide(al.encode(2, list(UUIDS[:2])), {}, UUIDS[:2]).ok
    # Slurm picks the GPUs itself: the count is what is checked.
    assert decide(al.encode(2), {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "4,5"}).ok


def test_two_gpus_where_one_was_asked_for_is_a_mismatch() -> None:
    report = decide(al.encode(1, ["0", "1"]), {"CUDA_VISIBLE_DEVICES": "0,1"}, UUIDS)
    assert not report.ok
    assert report.problems == (f"can use 2 GPU(s) ({UUIDS[0]},{UUIDS[1]}), asked for 1",)
    # The same without NVML, from CUDA_VISIBLE_DEVICES alone.
    assert not decide(al.encode(1), {"CUDA_VISIBLE_DEVICES": "0,1"}).ok
    # CUDA_VISIBLE_DEVICES unset where NVML lists more than asked: every GPU is usable.
    assert not decide(al.encode(1), {}, UUIDS).ok
    # GPUs without asking for any.
    assert not decide(al.encode(0), {"CUDA_VISIBLE_DEVICES": "3"}, UUIDS).ok


def test_fewer_gpus_than_asked_is_a_mismatch() -> None:
    # Index 7 does not exist: CUDA ignores it and every entry after it.
    report = decide(al.encode(2, ["0", "7"]), {"CUDA_VISIBLE_DEVICES": "0,7"}, UUIDS)
    assert report.problems == (f"can use 1 GPU(s) ({UUIDS[0]}), asked for 2",)
    assert not decide(al.encode(1), {"CUDA_VISIBLE_DEVICES": ""}, UUIDS).ok
    missing = decide(al.encode(1), {}, None)
    assert not missing.ok and "can see none" in missing.problems[0]
    # A multi-node Slurm step that gave this node 1 GPU where 4 were asked for.
    short = decide(al.encode(4), {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_JOB_GPUS": "0"})
    assert short.problems == ("SLURM_JOB_GPUS lists 1 GPU(s) (0), asked for 4",)


def test_other_gpus_than_allocated_is_a_mismatch() -> None:
    report = decide(al.encode(1, [UUIDS[1]]), {}, (UUIDS[2],))
    assert report.problems == (f"can use GPUs {UUIDS[2]}, the site allocated {UUIDS[1]}",)
    by_index = decide(al.encode(1, ["1"]), {"CUDA_VISIBLE_DEVICES": "2"}, UUIDS)
    assert by_index.problems == ("CUDA_VISIBLE_DEVICES is 2, the site allocated 1",)
    # UUID prefixes resolve as CUDA resolves them.
    assert decide(al.encode(1, ["GPU-bbbb"]), {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, UUIDS).ok


def test_cpu_and_memory_differences_are_notes_not_failures() -> None:
    mine = sorted(os.sched_getaffinity(0))
    other = [max(mine) + 1]
    report = decide(al.encode(0, cpus=other, memory_bytes=1 << 20), {"CUDA_VISIBLE_DEVICES": ""})
    assert report.ok
    assert any(note.startswith("sees CPUs") for note in report.notes)
    matching = decide(al.encode(0, cpus=mine), {"CUDA_VISIBLE_DEVICES": ""})
    assert matching.ok and not any(n.startswith("sees CPUs") for n in matching.notes)


def test_memory_limit_reads_cgroup_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "work" / "w1").mkdir(parents=True)
    (tmp_path / "work" / "w1" / "memory.max").write_text("536870912\n")
    (tmp_path / "work" / "memory.max").write_text("max\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/work/w1\n")
    # The tightest of its own cgroup and every parent ("max" is no limit).
    assert al.memory_limit(str(tmp_path), str(proc)) == (536870912, "cgroup-v2")
    v1 = tmp_path / "v1"
    (v1 / "memory" / "slurm" / "job_1").mkdir(parents=True)
    (v1 / "memory" / "slurm" / "job_1" / "memory.limit_in_bytes").write_text("1048576\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc.write_text("5:cpu,cpuacct:/slurm/job_1\n4:memory:/slurm/job_1\n")
    assert al.memory_limit(str(v1), str(proc)) == (1048576, "cgroup-v1")


def test_check_writes_the_report_and_prove_exits_78(tmp_path: Path) -> None:
    env = {"CAIRN_ALLOCATION": al.encode(1), "CUDA_VISIBLE_DEVICES": "0,1",
           "CAIRN_WORKDIR": str(tmp_path)}
    report = al.check(env, nvml=lambda: None)
    assert report is not None and not report.ok
    written = al.read_report(str(tmp_path))
    assert written is not None and written["ok"] is False
    assert written["problems"] == ["can use 2 GPU(s) (0,1), asked for 1"]
    assert written["seen"]["cuda_visible_devices"] == ["0", "1"]
    assert json.loads((tmp_path / al.REPORT).read_text())["allocated"]["gpus"] == 1
    assert al.check({}) is None  # not started by a launcher that allocates

    code = "from cairn.worker.allocation import prove_allocation; prove_allocation(); print('ran')"
    bad = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == al.MISMATCH_EXIT and "ran" not in bad.stdout
    assert "allocation mismatch: can use 2 GPU(s)" in bad.stderr
    good = subprocess.run([sys.executable, "-c", code],
                          env={**os.environ, **env, "CUDA_VISIBLE_DEVICES": "3"},
                          capture_output=True, text=True, timeout=60)
    assert (good.returncode, good.stdout) == (0, "ran\n"), good.stderr


def test_the_module_needs_nothing_but_the_standard_library() -> None:
    # The exit wrapper loads it by path under `python -I -S`.
    path = Path(al.__file__)
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('a', "
            f"{str(path)!r}); m = importlib.util.module_from_spec(s); sys.modules['a'] = m; "
            "s.loader.exec_module(m); print(m.compare(m.parse('gpus=0'), "
            "m.observe({'CUDA_VISIBLE_DEVICES': ''})).ok, "
            "sorted({'json', 'cairn', 'msgspec', 'pynvml'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["True", "[]"], out.stderr
