"""Run the real `cairn` command against an embedded federation, as a user would, and wait for
workers to reach points they announce in files (every wait bounded)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from cairn.runtime.embedded import EmbeddedFederation
from tests.output_contract import check_json_output

CLI_TIMEOUT_S = 120.0


async def run_bounded(*argv: str | Path, env: Mapping[str, str] | None = None,
                      cwd: Path | None = None,
                      timeout_s: float = CLI_TIMEOUT_S) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a program run with no stdin; one that has not ended
    within `timeout_s` is killed and fails the test."""
    proc = await asyncio.create_subprocess_exec(
        *map(str, argv), env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(
            f"{' '.join(map(str, argv))} did not end within {timeout_s:g}s") from None
    assert proc.returncode is not None
    stdout = out.decode()
    words = [str(a) for a in argv]
    if words[1:3] == ["-m", "cairn"]:
        check_json_output(words[3:], proc.returncode, stdout)
    return proc.returncode, stdout, err.decode()


async def cairn(fed: EmbeddedFederation, *args: str, study: str,
                actor: str) -> tuple[int, str, str]:
    """`cairn ARGS` in a subprocess bound to `study` as `actor`: (exit code, stdout, stderr)."""
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, **fed.client_env(actor),
           "CAIRN_STUDY": study, "CAIRN_ACTOR": actor,
           "CAIRN_CONTEXT": str(fed.dir / "no-context.yaml")}
    return await run_bounded(sys.executable, "-m", "cairn", *args, env=env)


async def wait_for_lines(path: Path, count: int, timeout_s: float = 60.0) -> list[str]:
    """The lines of `path` once it holds at least `count` of them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never held {count} line(s)")
