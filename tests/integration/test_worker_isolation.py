"""Job code never sees its site parent's secrets, on a real secure embedded federation.

A hostile job runs its server role on the hub and a client on site-a, while another job's
workers (the victims) run at the same sites. Given the real host paths (as an insider who
knows the layout of `cairn up` would guess them), each hostile worker tries to read the hub
kit's credentials, its own site's kit and signing key, the root seed, the site parent's
`/proc/<pid>/cmdline` and `environ`, the site's `local/` files and site.yaml, the site's
worker folders and a victim's secret file and environment, and every other process's
environment it can find by itself; it swaps its log for a link to the hub's credentials
where it can, and reports what it read as its result. It reads nothing, and `cairn job logs`
leaks nothing.

The control: the same job on a site that isolates nothing (`sandbox: none, worker_uids:
none`, the study marked `trusted_code`) reads the secrets; and a study not marked trusted is
refused there, with cause `site-policy`, and the launcher says so in its health.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cairn import subjects
from cairn.client import Client
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import connect, make_federation, running
from tests.integration.cp_helpers import (
    default_policy,
    release_workers,
    rewrite_runtime,
    running_process,
    worker_files,
    write_job,
)

HOSTILE = '''\
import asyncio, os
from cairn.worker import Worker, main

def tried(path):
    """What of `path` this worker could read (a listing, or the first bytes); None: nothing."""
    try:
        if os.path.isdir(path):
            return sorted(os.listdir(path))
        with open(path, "rb") as fh:
            return fh.read(200).decode(errors="replace")
    except OSError:
        return None

async def run(w: Worker) -> None:
    targets = w.params["targets"][os.environ["CAIRN_SITE"]]
    read = {name: got for name, path in targets.items() if (got := tried(path)) is not None}
    # What it finds knowing no host path: every other process it can see.
    environ = {pid: got for pid in os.listdir("/proc")
               if pid.isdigit() and int(pid) != os.getpid()
               and (got := tried(f"/proc/{pid}/environ"))}
    own = {"creds": tried(os.environ["CAIRN_CREDS_FILE"]) is not None,
           "data": tried(os.environ["CAIRN_DATA"]), "folder": os.path.basename(os.getcwd())}
    # Its log becomes a link to the hub's credentials, where it may: `cairn job logs` reads it.
    try:
        os.rename("worker.log", "worker.log.was")
        os.symlink(targets["hub kit creds"], "worker.log")
        swapped = True
    except OSError:
        swapped = False
    await w.result({"read": read, "environ": environ, "own": own, "swapped_log": swapped})
    # The job ends with its server: that one stays until the test has every report.
    for _ in range(1200 if os.environ["CAIRN_ROLE"] == "server" else 0):
        if os.path.exists("release"):
            break
        await asyncio.sleep(0.1)

main(run)
'''

VICTIM = '''\
import os, pathlib, time
pathlib.Path("secret.txt").write_text("victim-secret")
for _ in range(1200):  # held until the test releases it, 120 s at most
    if os.path.exists("release"):
        break
    time.sleep(0.1)
'''

ROLES = """\
    roles:
      server:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 256Mi}
      client:
        entrypoint: python main.py
        resources: {cpus: 1, memory: 256Mi}
        sites: [site-a]
        min_sites: 1
    """
SITES = ("hub", "site-a")
NOT_ISOLATED = {"process": {"sandbox": "none", "worker_uids": "none"}}


async def _launcher_health(fed: EmbeddedFederation, site: str) -> dict[str, Any]:
    bus = await fed.bus()
    try:
        reply: dict[str, Any] = json.loads(
            await bus.request(subjects.health("launcher", site), b"", timeout=5))
        return reply
    finally:
        await bus.close()


async def _targets(fed: EmbeddedFederation, victim: str) -> dict[str, dict[str, str]]:
    """Per site, the host paths a hostile worker tries; each one there and readable here."""
    assert fed.trust is not None
    trust = fed.trust.dir
    out: dict[str, dict[str, str]] = {}
    for site in SITES:
        health = await _launcher_health(fed, site)
        [victim_dir] = [d for d in (await worker_files(fed, victim, "secret.txt", 3))
                        if f"/sites/{site}/" in str(d)]
        victim_pid = await running_process(fed, victim, site)
        paths = {
            "hub kit creds": fed.trust.creds(fed.hub),
            "own kit creds": fed.trust.creds(site),
            "own kit signing key": fed.trust.kit(site) / "signing.nk",
            "root seed": trust / "root" / "root.nk",
            "trust folder": trust,
            "authority key": trust / "authority" / "account.nk",
            "site parent cmdline": Path(f"/proc/{health['pid']}/cmdline"),
            "site parent environ": Path(f"/proc/{health['pid']}/environ"),
            "site local folder": fed.site_dir(site) / "local",
            "site study_runtime.yaml": fed.site_dir(site) / "local" / "study_runtime.yaml",
            "site.yaml": fed.site_config(site),
            "site worker folders": fed.site_dir(site) / "work" / "workers",
            "site code bundles": fed.site_dir(site) / "work" / "bundles",
            "victim folder": victim_dir.parent,
            "victim file": victim_dir,
            "victim environ": Path(f"/proc/{victim_pid}/environ"),
        }
        for name, path in paths.items():
            assert path.exists(), f"{name}: {path} is not there to be tried"
        out[site] = {name: str(path) for name, path in paths.items()}
    return out


async def _hostile_run(fed: EmbeddedFederation, client: Client, tmp_path: Path
                       ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Run the victim and hostile jobs; (hostile result per site, its log per site)."""
    victim = await client.submit(write_job(tmp_path / "victim", name="victim", script=VICTIM,
                                           roles=ROLES.replace("[site-a]", "all")))
    try:
        targets = await _targets(fed, victim)
        params = json.dumps({"targets": targets})
        hostile = await client.submit(write_job(tmp_path / "hostile", name="hostile",
                                                script=HOSTILE, roles=ROLES,
                                                extra=f"params: {params}\n"))
        results = await _reports(client, hostile)
        release_workers(fed, hostile)
        final = await client.wait(hostile, timeout=120)
        assert final.state == "completed", (final.cause, final.message, final.workers)
    finally:
        release_workers(fed, victim)
    logs: dict[str, bytes] = {}
    async for chunk in client.logs(hostile):
        logs[chunk.site] = logs.get(chunk.site, b"") + chunk.data
    return results, logs


async def _reports(client: Client, job: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Each site's hostile report (its result), once every site has sent one."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        state = await client.job(job)
        results = {r.site: r.value for r in state.results}
        if set(results) >= set(SITES):
            return results
        assert not state.terminal and asyncio.get_running_loop().time() < deadline, state
        await asyncio.sleep(0.1)


@pytest.fixture
async def open_fed(tmp_path: Path) -> Any:
    """A secure federation whose sites do not isolate their workers at all."""
    fed = make_federation(tmp_path)
    fed.site_settings = {site: NOT_ISOLATED for site in fed.sites}
    async with running(fed):
        yield fed


async def test_a_hostile_job_reads_nothing_of_its_sites(
        federation: EmbeddedFederation, client: Client, tmp_path: Path) -> None:
    for site in SITES:
        health = await _launcher_health(federation, site)
        assert (health["sandbox"], health["untrusted_code"]) == ("bwrap", "isolated"), health
    results, logs = await _hostile_run(federation, client, tmp_path)

    assert set(results) == set(SITES)  # the server role on the hub, a client on site-a
    assert federation.trust is not None  # and `cairn up` keeps its root out of others' reach
    for folder in (federation.trust.dir, federation.trust.dir / "root"):
        assert folder.stat().st_mode & 0o777 == 0o700
    for site, report in results.items():
        read = dict(report["read"])
        # The way to its own folder is all it sees of the site's worker folders.
        assert read.pop("site worker folders", None) in (None, [report["own"]["folder"]])
        assert read == {}, (site, read)
        assert report["environ"] == {}, (site, report["environ"])
        # Not a worker that could read nothing at all: its own credential and data it can.
        assert report["own"]["creds"] and report["own"]["data"] == ["shared"], report["own"]
        # Under a uid of its own it cannot even swap its log (it is the launcher's file).
        assert report["swapped_log"] is False
    _no_seed_in(federation, logs)


def _no_seed_in(fed: EmbeddedFederation, logs: dict[str, bytes]) -> None:
    assert fed.trust is not None
    seed = fed.trust.creds(fed.hub).read_text().split("SEED-----")[1].split()[0]
    for site, text in logs.items():
        assert seed.encode() not in text, f"the hub's seed leaked through {site}'s log"


async def test_without_isolation_the_same_job_reads_the_secrets(
        open_fed: EmbeddedFederation, tmp_path: Path) -> None:
    """The control: what the sandbox and the worker uid keep out is there to be read."""
    for site in open_fed.sites:
        assert (await _launcher_health(open_fed, site))["untrusted_code"] == "refused"
        policy = default_policy(open_fed, site)
        await rewrite_runtime(open_fed, site, {"demo": {**policy, "trusted_code": True}})
    client = await connect(open_fed)
    try:
        results, logs = await _hostile_run(open_fed, client, tmp_path)
    finally:
        await client.close()
    # What the launcher itself reads back follows no link, isolated or not.
    assert all(report["swapped_log"] for report in results.values())
    _no_seed_in(open_fed, logs)
    for site, report in results.items():
        read = report["read"]
        assert {"hub kit creds", "root seed", "site parent environ", "victim file",
                "site study_runtime.yaml"} <= set(read), (site, sorted(read))
        assert read["hub kit creds"].startswith("-----BEGIN NATS USER JWT-----")


async def test_a_study_not_marked_trusted_is_refused_where_nothing_isolates(
        tmp_path: Path) -> None:
    fed = make_federation(tmp_path)
    fed.site_settings = {"site-a": NOT_ISOLATED}
    fed.start()
    try:
        await fed.wait_healthy(60)
        health = await _launcher_health(fed, "site-a")
        assert (health["sandbox"], health["worker_uids"], health["untrusted_code"]) == (
            "none", "none", "refused")
        log = (fed.dir / "logs" / "site-site-a.log").read_text()
        assert "process workers are NOT isolated" in log and "trusted_code: true" in log
        client = await connect(fed)
        try:
            job = await client.submit(write_job(tmp_path / "job", roles=ROLES))
            final = await client.wait(job, timeout=120)
            refused = [w for w in final.workers.values() if w.site == "site-a"]
            assert [(w.cause, w.exit_code) for w in refused] == [("site-policy", None)], refused
            assert "trusted_code" in refused[0].message
            # The isolated hub ran its role all the same.
            assert [w.cause for w in final.workers.values() if w.site == "hub"] == [None]

            # Marked trusted, the same job runs there.
            policy = default_policy(fed, "site-a")
            await rewrite_runtime(fed, "site-a", {"demo": {**policy, "trusted_code": True}})
            again = await client.wait(await client.submit(
                write_job(tmp_path / "again", roles=ROLES)), timeout=120)
            assert again.state == "completed", (again.cause, again.workers)
        finally:
            await client.close()
    finally:
        fed.stop()
