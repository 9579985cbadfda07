"""The package map in pyproject.toml is complete, and `import cairn` names its top level."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import cairn

REPO = Path(__file__).resolve().parents[2]


def _mapped() -> tuple[dict[str, str], set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return dict(config["package-dir"]), set(config["packages"])


def _package_of(directory: Path, dirs: dict[str, str]) -> str | None:
    rel = directory.relative_to(REPO).as_posix()
    best = max((d for d in dirs.values() if rel == d or rel.startswith(d + "/")),
               key=len, default=None)
    if best is None:
        return None
    name = next(n for n, d in dirs.items() if d == best)
    rest = rel[len(best):].strip("/")
    return name + ("." + rest.replace("/", ".") if rest else "")


def test_every_package_directory_is_listed() -> None:
    """Mapped directories cannot be auto-discovered: a package missing from `packages` would
    install without its modules, and fail only on a user's machine."""
    dirs, packages = _mapped()
    found = set()
    for init in [*(REPO / "libs").rglob("__init__.py"), *(REPO / "services").rglob("__init__.py")]:
        name = _package_of(init.parent, dirs)
        assert name is not None, f"{init.parent} is not under a mapped directory"
        found.add(name)
    assert found - packages == set(), "add these to [tool.setuptools] packages"
    assert packages - found == set(), "these listed packages have no directory"


def test_import_cairn_is_cheap_and_names_the_top_level() -> None:
    code = ("import sys, cairn; assert 'cairn.client' not in sys.modules; "
            "assert 'nats' not in sys.modules; print(cairn.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == cairn.__version__
    from cairn import CairnError, Client, Worker, main
    from cairn.client.core import Client as CoreClient
    from cairn.errors import CairnError as Root
    from cairn.worker.sdk import Worker as SdkWorker
    from cairn.worker.sdk import main as sdk_main

    assert (Client, Worker, main, CairnError) == (CoreClient, SdkWorker, sdk_main, Root)


def test_the_ci_entry_point_is_a_valid_script() -> None:
    """`.ci/run` is what CI runs first: a syntax error in it fails every build before a test."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / ".ci" / "run"
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
