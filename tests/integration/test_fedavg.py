"""The FedAvg example end to end: a real federation runs examples/fedavg over 2 and 3 sites,
survives a client killed mid-job while min_sites remain, fails when too few remain, and never
puts a byte of a site's dataset on the bus."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from cairn import events as ev
from cairn.bus import Bus, job_files, replay
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from cairn.state.job import JobState
from tests.fixtures.federation import connect, make_federation
from tests.integration.cp_helpers import running_process, study_events

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "fedavg"
sys.path[:0] = [str(EXAMPLE), str(EXAMPLE / "app")]
import setup_data  # noqa: E402
from fedavg import model as lr  # noqa: E402

pytestmark = pytest.mark.slow


# -- glue -------------------------------------------------------------------------------------

@asynccontextmanager
async def federation_with_data(tmp_path: Path, sites: tuple[str, ...]
                               ) -> AsyncIterator[tuple[EmbeddedFederation, Client]]:
    fed = make_federation(tmp_path, sites)
    fed.start()
    try:
        await fed.wait_healthy(60)
        setup_data.write(fed.dir / "sites", hub=fed.hub)
        client = await connect(fed)
        try:
            yield fed, client
        finally:
            await client.close()
    finally:
        fed.stop()


def fedavg_job(tmp_path: Path, **params: Any) -> Path:
    """The example's job.yaml and app, with params overridden (min_sites on the role too)."""
    job = tmp_path / "job"
    shutil.copytree(EXAMPLE / "app", job / "app", dirs_exist_ok=True)
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["params"].update(params)
    spec["roles"]["client"]["min_sites"] = spec["params"]["min_sites"]
    (job / "job.yaml").write_text(yaml.safe_dump(spec))
    return job / "job.yaml"


def server_result(job: JobState) -> Any:
    values = [r.value for r in job.results if r.role == "server"]
    assert len(values) == 1, job.results
    return values[0]


def alone_accuracy(fed: EmbeddedFederation, site: str, epochs: int) -> float:
    """A site's model trained on its own data only, scored on the public test set."""
    folder = fed.site_dir(site) / "data" / "shared" / "fedavg"
    x, y = lr.load(folder / "train.npz")
    x_pub, y_pub = lr.load(fed.site_dir(fed.hub) / "data" / "shared" / "fedavg" /
                           "public_test.npz")
    return lr.accuracy(lr.train(lr.init(x.shape[1]), x, y, epochs=epochs, lr=0.5), x_pub, y_pub)


async def kill_client(fed: EmbeddedFederation, job_id: str, site: str) -> None:
    """SIGKILL the client worker at `site` (its wrapper, under the process WorkerRunning
    names, stays to record the signal, so the launcher reports the worker crashed)."""
    os.kill(await running_process(fed, job_id, site), signal.SIGKILL)


async def assert_clean_end(fed: EmbeddedFederation, job_id: str, workers: int) -> None:
    """Every worker exited 0 on its own (no cause, no stop sent to any site), and the job was
    completed only after the last of them had."""
    events = [e for e in await study_events(fed) if getattr(e, "job", None) == job_id]
    exits = [e for e in events if isinstance(e, ev.WorkerExited)]
    assert len(exits) == workers, exits
    assert all((e.exit_code, e.reason) == (0, None) for e in exits), exits
    assert not [e for e in events if isinstance(e, ev.CancelCommand)]
    tags = [ev.tag_of(e) for e in events]
    assert tags.count("job.completed") == 1
    last_exit = max(i for i, t in enumerate(tags) if t == "worker.exited")
    assert last_exit < tags.index("job.completed"), tags


async def wait_for_round(client: Client, job_id: str, rnd: int, timeout: float = 60) -> None:
    for _ in range(int(timeout / 0.1)):
        job = await client.job(job_id)
        server = [w for w in job.workers.values() if w.role == "server"]
        if server and (server[0].step or 0) >= rnd:
            return
        assert not job.terminal, job
        await asyncio.sleep(0.1)
    raise AssertionError(f"round {rnd} did not end within {timeout}s")


# -- tests ------------------------------------------------------------------------------------

async def test_fedavg_two_sites_beats_each_site_alone_and_keeps_data_home(
        tmp_path: Path) -> None:
    async with federation_with_data(tmp_path, ("hub", "site-a", "site-b")) as (fed, client):
        job_id = await client.submit(fedavg_job(tmp_path, rounds=3, min_sites=2))
        final = await client.wait(job_id, timeout=120)
        assert final.state == "completed", final
        await assert_clean_end(fed, job_id, workers=3)
        result = server_result(final)
        assert len(result["accuracy"]) == 3
        fed_acc = result["accuracy"][-1]
        alone = {s: alone_accuracy(fed, s, epochs=3 * 20) for s in ("site-a", "site-b")}
        assert fed_acc > max(alone.values()) + 0.05, (fed_acc, alone)
        assert all(r["sites"] == ["site-a", "site-b"] for r in result["rounds"])

        # The model came back as a file whose accuracy is the one reported.
        [model_file] = [f for r in final.results for f in r.files]
        assert fed.nats is not None
        bus = await fed.bus()
        try:
            store = job_files(bus, "demo", final.job)
            path = tmp_path / "model.npz"
            path.write_bytes(await store.get(model_file.digest, digest=model_file.digest))
            with np.load(path) as m:
                model = {"w": m["w"], "b": m["b"]}
            x_pub, y_pub = lr.load(fed.site_dir("hub") / "data/shared/fedavg/public_test.npz")
            assert lr.accuracy(model, x_pub, y_pub) == pytest.approx(fed_acc)
            await assert_no_dataset_bytes(bus, fed, ("site-a", "site-b"))
        finally:
            await bus.close()


async def assert_no_dataset_bytes(bus: Bus, fed: EmbeddedFederation,
                                  sites: tuple[str, ...]) -> None:
    """No slice of any site's raw train/test arrays is in DATA_, STUDY_ or the object store."""
    patterns = []
    for site in sites:
        for split in ("train", "test"):
            x, _y = lr.load(fed.site_dir(site) / "data" / "shared" / "fedavg" / f"{split}.npz")
            raw = x.tobytes()
            patterns += [raw[i:i + 96] for i in range(0, len(raw) - 96, len(raw) // 7)]
            patterns.append(x[:, 0].tobytes()[:96])  # a column, should it be sent transposed
    assert len(patterns) > 10
    streams = ["DATA_demo", "STUDY_demo", "OBJ_artifacts_demo"]
    seen = 0
    for stream in streams:
        blob = bytearray()
        async for r in replay(bus, stream):
            blob += r.raw
            seen += 1
        for p in patterns:
            assert p not in blob, f"dataset bytes found in {stream}"
    assert seen > 0


async def test_fedavg_three_sites(tmp_path: Path) -> None:
    sites = ("hub", "site-a", "site-b", "site-c")
    async with federation_with_data(tmp_path, sites) as (fed, client):
        job_id = await client.submit(fedavg_job(tmp_path, rounds=3, min_sites=3))
        final = await client.wait(job_id, timeout=120)
        assert final.state == "completed", final
        result = server_result(final)
        assert all(r["sites"] == ["site-a", "site-b", "site-c"] for r in result["rounds"])
        alone = [alone_accuracy(fed, s, epochs=60) for s in sites[1:]]
        assert result["accuracy"][-1] > max(alone) + 0.05, (result["accuracy"], alone)


async def test_client_killed_with_min_sites_left_job_completes(tmp_path: Path) -> None:
    sites = ("hub", "site-a", "site-b", "site-c")
    async with federation_with_data(tmp_path, sites) as (fed, client):
        # A round timeout far past the wait below: the job completes in time only because
        # the server learned of the exit from the launcher instead of waiting the round out.
        job_id = await client.submit(fedavg_job(tmp_path, rounds=4, min_sites=2, delay=0.5,
                                                round_timeout=3600))
        await wait_for_round(client, job_id, 1)
        await kill_client(fed, job_id, "site-c")
        final = await client.wait(job_id, timeout=120)
        assert final.state == "completed", final
        killed = next(w for w in final.workers.values() if w.site == "site-c")
        assert killed.exit_code != 0 and killed.cause == "crashed", killed
        result = server_result(final)
        assert result["rounds"][0]["sites"] == ["site-a", "site-b", "site-c"]
        assert result["rounds"][-1]["sites"] == ["site-a", "site-b"]


async def test_client_killed_below_min_sites_job_fails(tmp_path: Path) -> None:
    async with federation_with_data(tmp_path, ("hub", "site-a", "site-b")) as (fed, client):
        job_id = await client.submit(fedavg_job(tmp_path, rounds=6, min_sites=2, delay=0.5,
                                                round_timeout=20))
        await wait_for_round(client, job_id, 1)
        await kill_client(fed, job_id, "site-b")
        final = await client.wait(job_id, timeout=60)
        assert final.state == "failed", final
        assert "site-b" in final.message, final
        assert final.cause == "too-few-sites", final


async def test_two_of_three_clients_killed_job_fails_too_few_sites(tmp_path: Path) -> None:
    sites = ("hub", "site-a", "site-b", "site-c")
    async with federation_with_data(tmp_path, sites) as (fed, client):
        job_id = await client.submit(fedavg_job(tmp_path, rounds=6, min_sites=2, delay=0.5,
                                                round_timeout=20))
        await wait_for_round(client, job_id, 1)
        await kill_client(fed, job_id, "site-b")
        await kill_client(fed, job_id, "site-c")
        final = await client.wait(job_id, timeout=60)
        assert final.state == "failed", final
        assert final.cause == "too-few-sites", final
