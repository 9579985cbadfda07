"""Worker SDK without a network: the environment contract, FedAvg's math, and the round
protocol run in memory (server and clients over the fake bus of test_worker_dataplane)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cairn.errors import InvalidInput
from cairn.events import Deployment
from cairn.worker import Worker, WorkerEnvError
from cairn.worker.dataplane import DataPlane
from cairn.worker.rounds import TooFewSites, fedavg, run_client, run_server
from tests.unit.test_worker_dataplane import FakeBus, bus  # noqa: F401 - fixture

ENV = {"CAIRN_NATS_URL": "nats://127.0.0.1:1", "CAIRN_STUDY": "demo", "CAIRN_JOB": "j-1",
       "CAIRN_SITE": "site-a", "CAIRN_ROLE": "client", "CAIRN_RANK": "2",
       "CAIRN_ATTEMPT": "1", "CAIRN_WORKDIR": "/w", "CAIRN_DATA": "/w/.cairn/data",
       "CAIRN_PARAMS": '{"rounds": 5, "lr": 0.1}'}


# -- environment ------------------------------------------------------------------------------

def test_from_env_reads_the_contract() -> None:
    w = Worker.from_env(ENV)
    assert (w.study, w.job, w.site, w.role, w.rank, w.attempt) == (
        "demo", "j-1", "site-a", "client", 2, 1)
    assert str(w.workdir) == "/w" and str(w.data_dir) == "/w/.cairn/data"
    assert w.params == {"rounds": 5, "lr": 0.1}


def test_from_env_names_what_is_missing() -> None:
    env = {k: v for k, v in ENV.items() if k not in ("CAIRN_JOB", "CAIRN_ROLE")}
    with pytest.raises(WorkerEnvError, match="CAIRN_JOB, CAIRN_ROLE not set"):
        Worker.from_env(env)
    with pytest.raises(WorkerEnvError, match="malformed"):
        Worker.from_env({**ENV, "CAIRN_RANK": "two"})
    with pytest.raises(WorkerEnvError, match="JSON object"):
        Worker.from_env({**ENV, "CAIRN_PARAMS": "[1]"})


def test_unconnected_worker_says_how_to_connect() -> None:
    with pytest.raises(Exception, match=r"async with Worker\.from_env"):
        _ = Worker.from_env(ENV).bus


# -- fedavg -----------------------------------------------------------------------------------

def test_fedavg_weights_by_samples() -> None:
    a = {"w": np.array([1.0, 0.0]), "b": np.array([1.0])}
    b = {"w": np.array([0.0, 4.0]), "b": np.array([-1.0])}
    out = fedavg([(a, 300), (b, 100)])
    np.testing.assert_allclose(out["w"], [0.75, 1.0])
    np.testing.assert_allclose(out["b"], [0.5])
    assert fedavg([([1.0, 2.0], 1), ([3.0, 4.0], 1)]) == [2.0, 3.0]


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=5),
       st.lists(st.integers(1, 10_000), min_size=1, max_size=6))
def test_fedavg_of_equal_models_is_that_model(values: list[float], ns: list[int]) -> None:
    model = {"w": np.array(values)}
    out = fedavg([(model, n) for n in ns])
    np.testing.assert_allclose(out["w"], model["w"], rtol=1e-9, atol=1e-6)


def test_fedavg_refuses_what_cannot_be_averaged() -> None:
    with pytest.raises(InvalidInput, match="at least one"):
        fedavg([])
    with pytest.raises(InvalidInput, match="positive"):
        fedavg([(np.zeros(2), 0)])
    with pytest.raises(InvalidInput, match="different keys"):
        fedavg([({"a": 1.0}, 1), ({"b": 1.0}, 1)])


# -- rounds in memory -------------------------------------------------------------------------

class MemoryWorker(Worker):
    """A worker whose bus is the fake one; events are kept in a list."""

    def __init__(self, fake: FakeBus, role: str, rank: int, site: str,
                 deployments: list[Deployment], **params: Any) -> None:
        super().__init__(nats_url="nats://fake", study="demo", job="j-1", site=site,
                         role=role, rank=rank, params=params)
        self._fake = fake
        self.events: list[tuple[str, Any]] = []
        self._deployed = deployments

    async def connect(self) -> None:
        self._data = DataPlane(self._fake, study="demo", job="j-1",  # type: ignore[arg-type]
                               site=self.site, role=self.role, rank=self.rank)
        await self._data.start()

    async def close(self) -> None:
        if self._data is not None:
            await self._data.close()

    async def progress(self, step: int | None = None, total: int | None = None,
                       message: str = "") -> None:
        self.events.append(("progress", (step, total, message)))

    async def metric(self, step: int | None = None, **values: float) -> None:
        self.events.append(("metric", (step, values)))

    async def watch_job(self, timeout: float = 10.0) -> None:
        self.deployments = list(self._deployed)


def deployments(n: int) -> list[Deployment]:
    return [Deployment(site=f"site-{i}", role="client", rank=i) for i in range(n)]


def train_towards(target: float, n: int) -> Any:
    def train(model: dict[str, np.ndarray], rnd: int) -> Any:
        return {"w": model["w"] + (target - model["w"]) * 0.5}, n, {"acc": target}
    return train


async def test_rounds_average_clients_and_stop_them(bus: FakeBus) -> None:  # noqa: F811
    deployed = deployments(2)
    server = MemoryWorker(bus, "server", 0, "hub", deployed, rounds=2, min_sites=2)
    clients = [MemoryWorker(bus, "client", i, f"site-{i}", deployed) for i in range(2)]
    for w in (server, *clients):
        await w.connect()
    trains = [train_towards(1.0, 100), train_towards(3.0, 300)]
    runs = [asyncio.create_task(run_client(c, t)) for c, t in zip(clients, trains, strict=True)]
    result = await asyncio.wait_for(run_server(server, initial={"w": np.zeros(1)}), 5)
    assert await asyncio.gather(*runs) == [2, 2]
    # Round 1: 0.5 and 1.5 weighted 1:3 -> 1.25; round 2: 1.125 and 2.125 -> 1.875.
    np.testing.assert_allclose(result.model["w"], [1.875])
    assert [r.sites for r in result.rounds] == [["site-0", "site-1"]] * 2
    assert result.rounds[0].metrics["clients_acc"] == pytest.approx(2.5)
    assert [e[1][0] for e in server.events if e[0] == "metric"] == [1, 2]


async def test_silent_client_below_min_sites_fails_the_round(bus: FakeBus) -> None:  # noqa: F811
    deployed = deployments(2)
    server = MemoryWorker(bus, "server", 0, "hub", deployed, rounds=2, min_sites=2,
                          round_timeout=0.3)
    clients = [MemoryWorker(bus, "client", i, f"site-{i}", deployed) for i in range(2)]
    for w in (server, *clients):
        await w.connect()
    live = asyncio.create_task(run_client(clients[0], train_towards(1.0, 10)))
    await clients[1].send("server", 0, "ready", {"site": "site-1"})  # ready, then silent
    with pytest.raises(TooFewSites, match="too few sites: 1 of 2 needed answered round 1"):
        await asyncio.wait_for(run_server(server, initial={"w": np.zeros(1)}), 5)
    live.cancel()


async def test_exited_client_is_not_waited_for(bus: FakeBus) -> None:  # noqa: F811
    deployed = deployments(3)
    # A round timeout far past the bound below: the round ends in time only because the
    # exited client is not waited for.
    server = MemoryWorker(bus, "server", 0, "hub", deployed, rounds=1, min_sites=2,
                          round_timeout=3600)
    clients = [MemoryWorker(bus, "client", i, f"site-{i}", deployed) for i in range(3)]
    for w in (server, *clients):
        await w.connect()
    runs = [asyncio.create_task(run_client(c, train_towards(1.0, 10))) for c in clients[:2]]
    await clients[2].send("server", 0, "ready", {"site": "site-2"})
    server.exited[("client", 2)] = None  # type: ignore[assignment] - as watch_job records it
    result = await asyncio.wait_for(run_server(server, initial={"w": np.zeros(1)}), 60)
    assert result.rounds[0].sites == ["site-0", "site-1"]
    await asyncio.gather(*runs)


async def test_a_client_ends_when_the_server_exited_without_a_stop(
        bus: FakeBus) -> None:  # noqa: F811
    deployed = deployments(1)
    server = MemoryWorker(bus, "server", 0, "hub", deployed)
    client = MemoryWorker(bus, "client", 0, "site-0", deployed, client_timeout=3600)
    for w in (server, client):
        await w.connect()
    run = asyncio.create_task(run_client(client, train_towards(1.0, 10)))
    ready = await server.receive("ready", 5)
    assert ready.sender_site == "site-0"
    assert not run.done()
    # The launcher reports the server's exit (as watch_job records it); no stop was sent.
    client.exited[("server", 0)] = None  # type: ignore[assignment]
    client.exits_changed.set()
    assert await asyncio.wait_for(run, 5) == 0


async def test_a_task_the_server_left_before_it_exited_is_still_trained(
        bus: FakeBus) -> None:  # noqa: F811
    deployed = deployments(1)
    server = MemoryWorker(bus, "server", 0, "hub", deployed)
    client = MemoryWorker(bus, "client", 0, "site-0", deployed)
    for w in (server, client):
        await w.connect()
    await server.broadcast("task", {"round": 1, "model": {"w": np.zeros(1)}})
    client.exited[("server", 0)] = None  # type: ignore[assignment]
    # The round-1 task is there: the client trains it before it notices the server is gone.
    assert await asyncio.wait_for(run_client(client, train_towards(1.0, 10)), 5) == 1


async def test_a_client_with_no_task_for_its_idle_timeout_fails(
        bus: FakeBus) -> None:  # noqa: F811
    from cairn.errors import Timeout

    deployed = deployments(1)
    client = MemoryWorker(bus, "client", 0, "site-0", deployed, client_timeout=0.3)
    await client.connect()
    with pytest.raises(Timeout, match=r"no task from server/0 within 0\.3s"):
        await asyncio.wait_for(run_client(client, train_towards(1.0, 10)), 5)
