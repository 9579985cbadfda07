"""A cached venv with PyPI nvflare, apart from Cairn's: for the import-flare tests and the
FLARE side of `make bench` (NVIDIA FLARE is never one of Cairn's dependencies).

    python tools/flare_venv.py          # make it if missing; print its python

It lives in $CAIRN_FLARE_VENV, else ~/.cache/cairn/nvflare-<version>, and is made by the
Python that runs this (`-m venv`, then `pip install nvflare==<version>`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NVFLARE_VERSION = "2.9.0"


def venv_dir() -> Path:
    env = os.environ.get("CAIRN_FLARE_VENV")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "cairn" / f"nvflare-{NVFLARE_VERSION}"


def python() -> Path | None:
    """The venv's python if nvflare imports there, else None."""
    exe = venv_dir() / "bin" / "python"
    if not exe.exists():
        return None
    ok = subprocess.run([str(exe), "-c", "import nvflare"], capture_output=True, timeout=120)
    return exe if ok.returncode == 0 else None


def ensure(base_python: str = sys.executable) -> Path:
    """Make the venv unless it works already; its python."""
    found = python()
    if found is not None:
        return found
    where = venv_dir()
    where.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([base_python, "-m", "venv", "--clear", str(where)], check=True)
    subprocess.run([str(where / "bin" / "pip"), "install", "--quiet",
                    "--disable-pip-version-check", f"nvflare=={NVFLARE_VERSION}"], check=True)
    made = python()
    if made is None:
        raise SystemExit(f"nvflare does not import in {where}")
    return made


if __name__ == "__main__":
    print(ensure())
