"""Run the real `cairn` command against an embedded federation, as a user would, and wait for
workers to reach points they announce in files (every wait bounded)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from cairn.runtime.embedded import EmbeddedFederation

CLI_TIMEOUT_S = 120.0


async def cairn(fed: EmbeddedFederation, *args: str, study: str,
                actor: str) -> tuple[int, str, str]:
    """`cairn ARGS` in a subprocess bound to `study` as `actor`: (exit code, stdout, stderr)."""
    assert fed.nats is not None
    env = {**os.environ, "CAIRN_NATS_URL": fed.nats.url, **fed.client_env(actor),
           "CAIRN_STUDY": study, "CAIRN_ACTOR": actor,
           "CAIRN_CONTEXT": str(fed.dir / "no-context.yaml")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn", *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(
            f"cairn {' '.join(args)} did not end within {CLI_TIMEOUT_S:g}s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def wait_for_lines(path: Path, count: int, timeout_s: float = 60.0) -> list[str]:
    """The lines of `path` once it holds at least `count` of them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never held {count} line(s)")
