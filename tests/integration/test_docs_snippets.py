"""Every `sh` and `python` block in docs/ runs, as a reader would run it, against the default
secure federation: `cairn up` (TLS, the authority, one credential each) in the background in
a fresh copy of the checkout, each site with the FedAvg example's data, and the snippets run
from that copy with its `.cairn/context.yaml`. A page's blocks run in order in one shell, so
what one exports the next sees; a failing block fails its page and names its line.

The convention (which blocks run, `# not run: <why>`) is in tests/docs_snippets.py and held
by tests/unit/test_docs_fences.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn.errors import Unavailable
from cairn.runtime.natsserver import find_nats_server
from tests.docs_snippets import REPO, fences, pages

PAGE_TIMEOUT_S = 240.0
UP_TIMEOUT_S = 120.0
RUNNER = """\
import ast, asyncio, sys
path, label = sys.argv[1], sys.argv[2]
code = compile(open(path).read(), label, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
result = eval(code, {"__name__": "__main__"})
if asyncio.iscoroutine(result):
    asyncio.run(result)
"""
RUN_PAGES = [p for p in pages() if any(f.runs for f in fences(p))]


@dataclass
class Reader:
    """Where a reader of the docs stands: a checkout with `cairn up` running in it."""

    checkout: Path
    env: dict[str, str]
    up: subprocess.Popen[bytes]
    up_log: Path


def _copy_checkout(target: Path) -> None:
    """The checkout's tracked files (what a fresh clone holds), not its venv or its state."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached",
                             "--others", "--exclude-standard"], capture_output=True,
                            check=False, timeout=60)
    names = [n for n in listed.stdout.decode().split("\0") if n] if listed.returncode == 0 else []
    if not names:  # not a git checkout: everything but what git would ignore
        shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(
            ".venv", ".git", ".cairn", "build", "*.egg-info", "__pycache__", ".*_cache"))
        return
    for name in names:
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _wait_up(reader: Reader) -> None:
    context = reader.checkout / ".cairn" / "context.yaml"
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not (context.exists() and "files " in reader.up_log.read_text(errors="replace")):
        if reader.up.poll() is not None:
            raise AssertionError(f"cairn up exited {reader.up.returncode}: "
                                 f"{reader.up_log.read_text(errors='replace')}")
        if time.monotonic() > deadline:
            raise AssertionError(f"cairn up not up after {UP_TIMEOUT_S:g}s: "
                                 f"{reader.up_log.read_text(errors='replace')}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    try:
        find_nats_server()
    except Unavailable as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("reader")
    checkout, home = root / "checkout", root / "home"
    checkout.mkdir()
    home.mkdir()
    _copy_checkout(checkout)
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CAIRN_", "OTEL_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # The venv's `cairn` and `python` first, as after `. .venv/bin/activate`.
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(home),
               VIRTUAL_ENV=str(bin_dir.parent), PYTHONUNBUFFERED="1")
    log = root / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([str(bin_dir / "cairn"), "up", "--timeout", str(UP_TIMEOUT_S)],
                              cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    running = Reader(checkout, env, up, log)
    try:
        _wait_up(running)
        # Each site's own data, as the README's quick start makes it.
        subprocess.run([str(bin_dir / "python"), "examples/fedavg/setup_data.py",
                        "--sites-dir", ".cairn/sites"], cwd=checkout, env=env, check=True,
                       capture_output=True, timeout=120)
        yield running
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait(10)


def page_script(page: Path, scratch: Path) -> str:
    """One bash script that runs the page's blocks in order, each announced by its line."""
    parts = ["set -euo pipefail"]
    for index, fence in enumerate(f for f in fences(page) if f.runs):
        parts.append(f"echo {shlex.quote('>>> ' + fence.where)} >&2")
        if fence.kind == "sh":
            parts.append(fence.body)
        else:
            source = scratch / f"snippet-{index}.py"
            source.write_text(fence.body + "\n", encoding="utf-8")
            parts.append(f"python {shlex.quote(str(scratch / 'runner.py'))} "
                         f"{shlex.quote(str(source))} {shlex.quote(fence.where)}")
    return "\n".join(parts) + "\n"


# One page after another (the federation is shared): well within the 2-minute budget of the
# whole module on a quiet machine; a page's own bound is PAGE_TIMEOUT_S.
@pytest.mark.timeout(PAGE_TIMEOUT_S + 60)
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_page_runs_against_the_default_federation(reader: Reader, page: Path,
                                                      tmp_path: Path) -> None:
    (tmp_path / "runner.py").write_text(RUNNER, encoding="utf-8")
    script = tmp_path / "page.sh"
    script.write_text(page_script(page, tmp_path), encoding="utf-8")
    try:
        done = subprocess.run(["bash", str(script)], cwd=reader.checkout, env=reader.env,
                              capture_output=True, text=True, timeout=PAGE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{page.name} did not finish in {PAGE_TIMEOUT_S:g}s: "
                             f"{exc.stderr!r}") from None
    started = re.findall(r"^>>> (\S+)$", done.stderr, re.M)
    assert done.returncode == 0, (
        f"{started[-1] if started else page.name}: the block failed (exit {done.returncode})"
        f"\n--- stderr\n{done.stderr[-4000:]}\n--- stdout\n{done.stdout[-2000:]}")
    assert started == [f.where for f in fences(page) if f.runs]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]


def test_every_page_with_commands_is_run_or_says_why_not() -> None:
    quiet = [f.where for p in pages() for f in fences(p)
             if f.kind in ("sh", "python") and not f.runs and not f.not_run]
    assert not quiet, quiet
    assert RUN_PAGES, "no page has a block that runs"




