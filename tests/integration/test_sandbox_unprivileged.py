"""A launcher that is not root (a developer's `cairn up`) still sandboxes its workers: bwrap
makes user namespaces, warm workers join them, and a worker keeps no capability.

The launcher runs here as uid 65534 (nobody), so its interpreter must be one that uid can
run: this test's own, or the one `CAIRN_TEST_UNPRIVILEGED_PYTHON` names (a venv made from
/usr/bin/python3 with Cairn installed, where the test's own lives under /root). Skipped
without root (to become nobody), bwrap or such an interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.launcher.backends._sandbox import find_bwrap

NOBODY = 65534
PYTHON = os.environ.get("CAIRN_TEST_UNPRIVILEGED_PYTHON", sys.executable)
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]

LAUNCHER = """\
import asyncio, json, sys
from pathlib import Path
from cairn.launcher.backends import LaunchSpec, make_launch_id
from cairn.launcher.backends.process import ProcessBackend

LOOK = '''
import json, os
status = dict(line.rstrip("\\\\n").split(":\\\\t", 1) for line in open("/proc/self/status"))
print(json.dumps({"uid": os.getuid(), "caps": [status[k] for k in ("CapPrm", "CapEff")],
                  "no_new_privs": status["NoNewPrivs"], "root": sorted(os.listdir("/")),
                  "processes": len([p for p in os.listdir("/proc") if p.isdigit()]),
                  "workers": sorted(os.listdir(os.path.dirname(os.getcwd())))}))
'''

async def main(root):
    out = {}
    for warm in (False, True):
        backend = ProcessBackend(Path(root) / f"site-{warm}", warm=warm)
        try:
            out["isolation"] = backend.isolation.health()
            code = Path(root) / "code"
            code.mkdir(exist_ok=True)
            for rank in (0, 1):  # a warm backend's first launch may still start cold
                spec = LaunchSpec(launch_id=make_launch_id("j1", "s", "client", rank, 0),
                                  job="j1", study="x", site="s", role="client",
                                  entrypoint=["python", "-c", LOOK], code_dir=str(code))
                handle = await backend.launch(spec)
                ended = await backend.wait(handle)
                out[f"{warm}-{rank}"] = {"exit": [ended.exit_code, ended.cause, ended.message],
                                         "seen": Path(handle.log_path).read_text()}
            out[f"forked-{warm}"] = backend._zygote.forked if backend._zygote else 0
        finally:
            await backend.close()
    print(json.dumps(out))

asyncio.run(main(sys.argv[1]))
"""


def _usable() -> str | None:
    """Why this test cannot run here, or None."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and setpriv, to run the launcher as nobody"
    if find_bwrap() is None:
        return "needs bwrap (apt-get install bubblewrap)"
    # Through env: setpriv itself would open the program as root.
    tried = subprocess.run([*AS_NOBODY, "env", PYTHON, "-c",
                            "import cairn.launcher.backends.process"],
                           capture_output=True, cwd="/", timeout=60, check=False)
    if tried.returncode != 0:
        return (f"{PYTHON} is not usable by uid {NOBODY}: set CAIRN_TEST_UNPRIVILEGED_PYTHON "
                "to a venv made from /usr/bin/python3 with Cairn installed")
    return None


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A folder of nobody's (pytest's own folders are root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="cairn-nobody-"))
    os.chown(root, NOBODY, NOBODY)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_an_unprivileged_launcher_sandboxes_cold_and_warm_workers(nobody_dir: Path) -> None:
    if (why := _usable()) is not None:
        pytest.skip(why)
    root = nobody_dir
    done = subprocess.run([*AS_NOBODY, "env", f"HOME={root}", PYTHON, "-c", LAUNCHER, str(root)],
                          capture_output=True, text=True, cwd=root, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["isolation"] == {"sandbox": "bwrap", "worker_uids": "none",
                                "untrusted_code": "isolated"}
    assert out["forked-True"] >= 1  # warm workers did come from the zygote
    seen = []
    for key in ("False-0", "False-1", "True-0", "True-1"):
        assert out[key]["exit"][:2] == [0, None], out[key]
        seen.append(json.loads(out[key]["seen"]))
    for one in seen:
        assert one["uid"] == NOBODY  # its own uid again, not the user namespace's root
        assert one["caps"] == ["0000000000000000"] * 2 and one["no_new_privs"] == "1"
        assert len(one["workers"]) == 1 and one["processes"] <= 4
    assert seen[0]["root"] == seen[3]["root"]
