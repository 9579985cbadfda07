"""A job spec the bus cannot carry is refused before anything is sent, naming the limit.

The tests share one federation (this module's `federation`): each counts jobs and uploads
relative to what it found, and the one job that runs has ended before its test returns.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn import subjects
from cairn.client import Client
from cairn.errors import InvalidInput
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import make_federation, started
from tests.integration.cp_helpers import write_job


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    with started(make_federation(tmp_path_factory.mktemp("hostile-submit"))) as fed:
        yield fed


def big_spec(job_dir: Path, mebibytes: int) -> Path:
    # A 12 MiB spec needs a file limit above the default 4 MiB (CAIRN_YAML_MAX_BYTES).
    return write_job(job_dir, extra=f"params: {{blob: {'x' * (mebibytes << 20)}}}\n")


async def artifact_count(fed: EmbeddedFederation) -> int:
    assert fed.nats is not None
    bus = await fed.bus()
    try:
        try:
            info = await bus.js.stream_info(f"OBJ_{subjects.obj_artifacts('demo')}")
        except Exception:  # noqa: BLE001 - no store yet: nothing was ever uploaded
            return 0
        return int(info.state.messages)
    finally:
        await bus.close()


async def test_oversize_spec_is_refused_before_anything_is_sent(
        federation: EmbeddedFederation, client: Client, job_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAIRN_YAML_MAX_BYTES", str(64 << 20))
    spec = big_spec(job_dir, 12)
    jobs_before = len(await client.jobs())
    uploads_before = await artifact_count(federation)
    with pytest.raises(InvalidInput) as err:
        await client.submit(spec)
    text = str(err.value)
    assert text.startswith(f"{spec}: the request on cairn.api.study.demo.submit is ")
    assert "max_payload of 1048576 bytes" in text
    assert len(await client.jobs()) == jobs_before, "no job was submitted"
    assert await artifact_count(federation) == uploads_before, "no bundle was uploaded"


async def test_cli_refuses_an_oversize_spec_with_exit_3(
        federation: EmbeddedFederation, job_dir: Path, tmp_path: Path) -> None:
    ctx = federation.write_context(tmp_path / "context.yaml")
    spec = big_spec(job_dir, 2)
    env = {**os.environ, "CAIRN_CONTEXT": str(ctx), "CAIRN_YAML_MAX_BYTES": str(8 << 20)}
    env.pop("CAIRN_NATS_URL", None)
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "cairn", "job", "submit", str(spec)],
        capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {spec}: the request on ")
    assert "max_payload" in done.stderr


async def test_a_spec_that_fits_still_goes(federation: EmbeddedFederation, client: Client,
                                           job_dir: Path) -> None:
    uploads_before = await artifact_count(federation)
    job_id = await client.submit(write_job(job_dir, extra="params: {blob: small}\n"))
    assert await artifact_count(federation) > uploads_before, "the counter above sees uploads"
    final = await client.wait(job_id, timeout=120)
    assert final.state == "completed"
