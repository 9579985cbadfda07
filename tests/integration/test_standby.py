"""Standby services on a real federation: the active coordinator SIGKILLed, then frozen with
SIGSTOP, mid-job; the active authority SIGKILLed; the trust list reloaded live.

One federation for the module (`cairn up --standby`, lease TTL 1.5 s). Each failover is
waited for on the event that proves it: the standby answering its service's health ping
with its own pid (it answers nothing before it holds the lease).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from cairn import subjects
from cairn.bus import LEASE_HEADER, Bus, Lease, replay
from cairn.client import Client
from cairn.events import STUDY_DECODER, DeployCommand, Event, JobDispatched, StudyTerm
from cairn.runtime.embedded import EmbeddedFederation
from cairn.runtime.supervise import Supervisor
from cairn.runtime.watchdog import Watchdog
from cairn.subjects.table import Role, rows_of_event
from cairn.trust.credentials import Identity, Kind, issue
from cairn.trust.nkeyjwt import KeyKind, creds_file_text, new_seed, public_key
from cairn.trust.provision import revoke
from tests.fixtures.federation import connect, make_federation, started
from tests.integration.cp_helpers import write_job
from tests.integration.security_helpers import connect_as, refused_at_connect
from tests.integration.test_control_failures import SLEEPER, sleeper_roles, wait_running

TTL_S = 1.5


@pytest.fixture(scope="module")
def standby_fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFederation]:
    fed = make_federation(tmp_path_factory.mktemp("standby"))
    fed.standby = True
    fed.extra_env["CAIRN_LEASE_TTL_S"] = str(TTL_S)
    with started(fed) as running:
        yield running


@pytest.fixture
async def fed(standby_fed: EmbeddedFederation) -> AsyncIterator[EmbeddedFederation]:
    yield standby_fed
    # What a supervisor does: a parent that died or exited is started again (a standby now).
    for p in list(standby_fed.processes):
        if p.proc.poll() is not None:
            standby_fed.respawn(p.name)


@pytest.fixture
async def client(fed: EmbeddedFederation) -> AsyncIterator[Client]:
    c = await connect(fed)
    try:
        yield c
    finally:
        await c.close()


async def holder_pid(bus: Bus, service: str) -> int:
    record = await Lease(bus, service).current()
    assert record is not None, f"nobody holds the {service} lease"
    return record.pid


def process_of(fed: EmbeddedFederation, pid: int) -> str:
    return next(p.name for p in fed.processes if p.proc.pid == pid)


async def wait_active(bus: Bus, service: str, pid: int, timeout: float = 30) -> float:
    """Seconds until `service`'s health ping is answered by process `pid`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            reply = await bus.request(subjects.health(service, "hub"), b"", timeout=0.3)
        except Exception:
            reply = b"{}"
        status = msgspec.json.decode(reply)
        if status.get("pid") == pid and status.get("ready"):
            return time.monotonic() - t0
        await asyncio.sleep(0.05)
    raise AssertionError(f"{service} of pid {pid} never answered as the active one")


def _coordinators(event: Event) -> bool:
    """Whether the subject table names the coordinator as the writer of this event type."""
    return any(a.role is Role.COORDINATOR for row in rows_of_event(type(event))
               for a in row.writers)


async def coordinator_terms(bus: Bus, study: str = "demo") -> list[tuple[int, int]]:
    """(stream seq, lease term) of every coordinator event in the study's whole history."""
    out = []
    async for item in replay(bus, subjects.study_stream(study).name, STUDY_DECODER):
        if item.event is None or not _coordinators(item.event):
            continue
        header = (item.headers or {}).get(LEASE_HEADER, "")
        service, _, term = header.partition(":")
        assert service == "coordinator" and term.isdigit(), (item.subject, item.headers)
        out.append((item.seq, int(term)))
    return out


def assert_one_coordinator_at_a_time(terms: list[tuple[int, int]], takeovers: int) -> None:
    """Terms never go back in stream order (an old leader never acted after a new one), and
    each takeover's term acted."""
    seen = [t for _, t in terms]
    assert seen == sorted(seen), f"an older lease acted after a newer one: {terms}"
    assert len(set(seen)) >= takeovers + 1, terms


async def assert_fenced_by_term(bus: Bus, study: str = "demo") -> list[int]:
    """Each coordinator's events follow its own `study.term` (the server stores them only
    while that term is the last begun: `cairn.bus.Fence`); the terms begun, in order."""
    begun: list[int] = []
    async for item in replay(bus, subjects.study_stream(study).name, STUDY_DECODER):
        if isinstance(item.event, StudyTerm):
            begun.append(item.event.term)
        elif item.event is not None and _coordinators(item.event) and begun:
            header = (item.headers or {}).get(LEASE_HEADER, "")
            assert header == f"coordinator:{begun[-1]}", (item.seq, item.subject, header, begun)
    assert begun == sorted(set(begun)), begun
    return begun


async def assert_dispatched_once(bus: Bus, job_id: str) -> None:
    events = [r.event async for r in replay(bus, "STUDY_demo", STUDY_DECODER,
                                            filters=[subjects.job_all("demo", job_id)])
              if r.event is not None]
    dispatched = [e for e in events if isinstance(e, JobDispatched)]
    assert len(dispatched) == 1, dispatched
    deploys: list[str] = []
    async for r in replay(bus, "STUDY_demo", STUDY_DECODER):
        if isinstance(r.event, DeployCommand) and r.event.job == job_id:
            deploys.append(r.event.site)
    assert sorted(deploys) == sorted(set(deploys)), f"a site was sent the job twice: {deploys}"


async def _failover_mid_job(fed: EmbeddedFederation, client: Client, job_dir: Path,
                            freeze: bool) -> None:
    bus = await fed.bus()
    try:
        active = await holder_pid(bus, "coordinator")
        name = process_of(fed, active)
        other = next(p for p in fed.processes if "coordinator" in p.services
                     and p.proc.pid != active and p.proc.poll() is None)
        before = await coordinator_terms(bus)
        job_id = await client.submit(write_job(job_dir, script=SLEEPER,
                                               roles=sleeper_roles(4)))
        await wait_running(client, job_id)
        os.kill(active, signal.SIGSTOP if freeze else signal.SIGKILL)
        await wait_active(bus, "coordinator", other.proc.pid)
        if freeze:
            # Thawed, the old one finds its lease gone and exits (for its supervisor).
            os.kill(active, signal.SIGCONT)
            assert fed.process(name).proc.wait(20) == 7
        final = await client.wait(job_id, timeout=60)
        assert final.state == "completed", (final.cause, final.message, final.workers)
        view, _ = await client.replay()
        assert view.jobs[job_id] == final  # the new active one's state is the replay's
        await assert_dispatched_once(bus, job_id)
        terms = await coordinator_terms(bus)
        assert_one_coordinator_at_a_time(terms, takeovers=1)
        assert terms[-1][1] > max(t for _, t in before)
        begun = await assert_fenced_by_term(bus)
        assert begun[-1] == terms[-1][1], (begun, terms)
    finally:
        await bus.close()
        if freeze:
            try:
                os.kill(active, signal.SIGCONT)
            except ProcessLookupError:
                pass


async def test_coordinator_killed_mid_job_the_standby_finishes_it(
        fed: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    await _failover_mid_job(fed, client, job_dir, freeze=False)


async def test_coordinator_frozen_mid_job_loses_its_lease_and_acts_no_more(
        fed: EmbeddedFederation, client: Client, job_dir: Path) -> None:
    await _failover_mid_job(fed, client, job_dir, freeze=True)


def _ready_since(fed: EmbeddedFederation, t: float) -> bool:
    """Whether an authority wrote its ready file (it answers callouts) after `t`."""
    assert fed.trust is not None
    try:
        return float((fed.trust.authority / "ready").read_text()) > t
    except (OSError, ValueError):
        return False


async def admitted(fed: EmbeddedFederation, creds: Path) -> bool:
    """Whether a connection with `creds` gets in and is served (the server answers a PING
    only once the callout decided: a connect that nobody decides is closed, unserved)."""
    try:
        probe = await connect_as(fed, creds)
    except Exception:  # refused at connect
        return False
    try:
        await probe.nc.flush(timeout=10)
        return bool(probe.nc.is_connected)
    except Exception:
        return False
    finally:
        await probe.nc.close()


def _foreign_reader(fed: EmbeddedFederation, tmp: Path) -> tuple[Path, str]:
    """A reader credential signed by a root the federation does not trust (yet)."""
    root = new_seed(KeyKind.OPERATOR)
    seed = new_seed(KeyKind.USER)
    identity = Identity(kind=Kind.READER, name="outsider@org-x", study="demo")
    path = tmp / "outsider.creds"
    path.write_text(creds_file_text(issue(identity, public_key(seed), root), seed))
    return path, public_key(root)


async def test_authority_killed_the_standby_decides_and_reloads_trust_live(
        fed: EmbeddedFederation, tmp_path: Path) -> None:
    assert fed.trust is not None and fed.nats is not None
    bus = await fed.bus()
    try:
        active = await holder_pid(bus, "authority")
        name = process_of(fed, active)
        standby = next(p for p in fed.processes if p.name.startswith("authority")
                       and p.proc.pid != active)
        # No decision, no connection: with the active one dead and the standby held still,
        # nobody answers the server's callout, and even the hub is refused.
        os.kill(standby.proc.pid, signal.SIGSTOP)
        try:
            killed_at = time.time()
            fed.kill(name)
            assert not await admitted(fed, fed.trust.creds("hub"))
        finally:
            os.kill(standby.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while (holder := await Lease(bus, "authority").current()) is None or \
                holder.pid != standby.proc.pid or not _ready_since(fed, killed_at):
            assert time.monotonic() < deadline, "the standby authority never took over"
            await asyncio.sleep(0.05)
    finally:
        await bus.close()
    # The standby admits with the same decisions: the hub, and refuses a stranger.
    assert await admitted(fed, fed.trust.creds("hub"))
    outsider, root = _foreign_reader(fed, tmp_path)
    assert await refused_at_connect(fed, outsider)
    # The trust list reloads live: a root added is trusted within a poll, with no restart.
    roots = fed.trust.authority / "roots.txt"
    roots.write_text(roots.read_text() + root + "\n")
    deadline = time.monotonic() + 20
    while True:
        try:
            probe = await connect_as(fed, outsider)
            break
        except Exception:
            assert time.monotonic() < deadline, "the added root was never trusted"
            await asyncio.sleep(0.2)
    # The revocation list too: revoked, the open connection is cut and a new one refused.
    revoke(fed.trust.dir, "outsider@org-x")
    await asyncio.wait_for(probe.closed.wait(), 20)
    assert await refused_at_connect(fed, outsider)
    assert standby.proc.poll() is None
    assert "trust list reloaded" in standby.log.read_text()


async def test_a_frozen_site_parent_is_found_hung_killed_and_restarted(
        fed: EmbeddedFederation) -> None:
    lines: list[str] = []
    watchdog = Watchdog(fed, hang_s=2.0, every_s=0.3)
    supervisor = Supervisor(fed, say=lines.append, backoff=(0.2,), watchdog=watchdog)
    frozen = fed.process("site-site-a").proc.pid
    for _ in range(3):  # every parent answers: nothing is hung
        await asyncio.to_thread(supervisor.check)
        await asyncio.sleep(0.3)
    assert not any("answers no health ping" in line for line in lines), lines
    os.kill(frozen, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith("site-site-a restarted") for line in lines):
            assert time.monotonic() < deadline, lines
            await asyncio.to_thread(supervisor.check)
            await asyncio.sleep(0.2)
    finally:
        try:
            os.kill(frozen, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert any(f"site-site-a (pid {frozen}) answers no health ping" in line for line in lines)
    # No other parent was taken for hung (the standby's leased services are not pinged).
    assert [line for line in lines if "answers no health ping" in line] == [
        next(line for line in lines if "answers no health ping" in line)]
    await fed.wait_healthy(60)
