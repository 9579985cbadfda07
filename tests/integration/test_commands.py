"""The two first commands a new user runs, as subprocesses: `cairn up --check`, `cairn demo`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cairn.errors import Unavailable
from cairn.runtime.natsserver import find_nats_server


@pytest.fixture(autouse=True)
def _needs_nats() -> None:
    try:
        find_nats_server()
    except Unavailable as exc:
        pytest.skip(str(exc))


def cairn(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAIRN_")}
    return subprocess.run([sys.executable, "-m", "cairn", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_up_check_starts_reports_and_stops(tmp_path: Path) -> None:
    done = cairn("up", "--check", "--payload-grace", "7", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(r"healthy: \d+ services at 3 sites in [\d.]+s", done.stdout), done.stdout
    # Everything it started is gone: no context left behind.
    assert not (tmp_path / ".cairn" / "context.yaml").exists()
    # The coordinator got the payload grace asked for.
    log = (tmp_path / ".cairn" / "logs" / "coordinator.log").read_text()
    assert "payloads are deleted 7s after it ends" in log, log[-2000:]


@pytest.mark.parametrize("bad", ["-1", "soon"])
def test_up_refuses_a_bad_payload_grace_before_starting_anything(tmp_path: Path,
                                                                  bad: str) -> None:
    done = cairn("up", "--check", "--payload-grace", bad, cwd=tmp_path)
    assert done.returncode == 2
    assert "--payload-grace" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / ".cairn").exists()


def test_up_refuses_a_bad_site_name(tmp_path: Path) -> None:
    done = cairn("up", "--check", "--site", "a.b", cwd=tmp_path)
    assert done.returncode == 3
    assert "not a valid site name" in done.stderr and "Traceback" not in done.stderr


def test_demo_runs_the_main_job_end_to_end(tmp_path: Path) -> None:
    done = cairn("demo", "--out", str(tmp_path / "result"), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed in" in done.stdout
    assert (tmp_path / "result" / "server@hub" / "model.npz").is_file()
    assert "accuracy per round" in done.stdout
    assert "timeline" in done.stdout and " completed" in done.stdout
