"""The supervisor's restart policy: backoff grows while a process keeps dying, resets once it
stayed up, and every death and restart is a line for the operator."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cairn.errors import Timeout
from cairn.runtime.supervise import Supervisor, remember_port, remembered_port


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


@dataclass
class FakeProcess:
    name: str
    proc: FakeProc
    log: Path = Path("parent.log")


@dataclass
class FakeFederation:
    processes: list[FakeProcess] = field(default_factory=list)
    nats: Any = None
    next_pid: int = 100
    cluster: Any = None
    leaves: dict[str, Any] = field(default_factory=dict)

    def process(self, name: str) -> FakeProcess:
        return next(p for p in self.processes if p.name == name)

    healthy: list[str] = field(default_factory=list)
    """What `wait_healthy` does each time: "ok", or an error message it raises."""

    async def wait_healthy(self, timeout: float) -> float:
        outcome = self.healthy.pop(0)
        if outcome != "ok":
            raise Timeout(outcome)
        return 1.25

    def nats_members(self) -> list[Any]:
        return [self.nats] if self.nats is not None else []

    def restart_nats(self, member: int = 0) -> None:
        self.nats.proc = FakeProc(self.next_pid)

    def record(self) -> None:
        return None

    def respawn(self, name: str) -> None:
        self.next_pid += 1
        self.process(name).proc = FakeProc(self.next_pid)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_backoff_grows_then_resets_after_a_steady_run() -> None:
    fed = FakeFederation([FakeProcess("coordinator", FakeProc(1))])
    clock, lines = Clock(), []
    sup = Supervisor(fed, say=lines.append, backoff=(0.5, 1.0, 2.0), steady_s=60,  # type: ignore[arg-type]
                     clock=clock)
    sup.check()
    waits = []
    for _ in range(4):
        fed.process("coordinator").proc.returncode = -9
        sup.check()
        waits.append(float(lines[-1].split(" in ")[1].split("s ")[0]))
        clock.now += 0.1
        sup.check()
        assert "restarted" not in lines[-1], "not before its backoff is over"
        clock.now += waits[-1]
        sup.check()
        assert lines[-1].startswith("coordinator restarted (pid ")
    assert waits == [0.5, 1.0, 2.0, 2.0]
    clock.now += 61
    fed.process("coordinator").proc.returncode = 1
    sup.check()
    assert "exited with 1; restarting it in 0.5s" in lines[-1]
    assert sup.restarts == {"coordinator": 4}


def test_port_is_remembered_per_dir(tmp_path: Path) -> None:
    assert remembered_port(tmp_path) == 0
    remember_port(tmp_path, 45123)
    assert remembered_port(tmp_path) == 45123
    (tmp_path / "nats" / "port").write_text("not a port")
    assert remembered_port(tmp_path) == 0


@dataclass
class FakeNats:
    proc: FakeProc
    port: int = 4222
    url: str = "tls://127.0.0.1:4222"


def test_after_the_bus_restarts_it_says_when_every_service_answers_again() -> None:
    fed = FakeFederation(nats=FakeNats(FakeProc(7)),
                         healthy=["ok", "coordinator exited with 7", "not healthy: api@hub",
                                  "ok", "still not: api@hub", "still not: api@hub"])
    clock, lines = Clock(), []
    sup = Supervisor(fed, say=lines.append, backoff=(0.5,), clock=clock,  # type: ignore[arg-type]
                     rejoin_s=10)

    def bus_dies_and_comes_back() -> None:
        fed.nats.proc.returncode = -9
        sup.check()
        assert lines[-1].startswith("nats-server exited with -9; restarting it on port 4222")
        clock.now += 0.5

    bus_dies_and_comes_back()
    sup.check()  # restarted, and at once every service answers
    assert lines[-2].startswith("nats-server restarted on tls://127.0.0.1:4222")
    assert lines[-1] == "every service answers again (0.0s after the bus's restart)"

    bus_dies_and_comes_back()
    sup.check()  # a parent exited meanwhile (it is restarted by the same passes)
    assert lines[-1].startswith("nats-server restarted on")
    clock.now += 1
    sup.check()
    assert lines[-1].startswith("nats-server restarted on"), "not yet: nothing said"
    clock.now += 1.5
    sup.check()
    assert lines[-1] == "every service answers again (2.5s after the bus's restart)"

    bus_dies_and_comes_back()
    sup.check()
    clock.now += 11
    sup.check()
    assert lines[-1] == ("services did not all answer again within 10s of the bus's restart: "
                         "still not: api@hub")
    sup.check()
    assert fed.healthy == [], "and then it stops asking"
    assert sup.restarts == {"nats-server": 3}


@dataclass
class FakeLeafServer:
    proc: FakeProc | None
    monitor_port: int = 8222

    def restart(self, timeout: float = 15.0) -> None:
        self.proc = FakeProc(self.proc.pid + 1 if self.proc else 1)


@dataclass
class FakeLeaf:
    server: FakeLeafServer
    port: int = 40123
    url: str = "tls://127.0.0.1:40123"
    link: bool = True

    def linked(self) -> bool:
        return self.link


def test_a_dead_leaf_node_comes_back_on_its_port_and_says_when_it_is_linked() -> None:
    leaf = FakeLeaf(FakeLeafServer(FakeProc(30)))
    fed = FakeFederation(leaves={"site-a": leaf})
    clock, lines = Clock(), []
    sup = Supervisor(fed, say=lines.append, backoff=(0.5,), clock=clock)  # type: ignore[arg-type]
    sup.check()
    assert lines == []
    assert leaf.server.proc is not None
    leaf.server.proc.returncode = -9
    leaf.link = False
    sup.check()
    assert lines[-1] == ("leaf-site-a exited with -9; restarting it on port 40123 "
                         "(same config) in 0.5s")
    clock.now += 0.5
    sup.check()
    assert lines[-1] == "leaf-site-a restarted on tls://127.0.0.1:40123 (pid 31)"
    clock.now += 0.3
    sup.check()
    assert len(lines) == 2, "not linked yet: nothing more said"
    leaf.link = True
    sup.check()
    assert lines[-1] == "leaf-site-a reached the federation again (0.3s after its restart)"
    sup.check()
    assert len(lines) == 3 and sup.restarts == {"leaf-site-a": 1}
