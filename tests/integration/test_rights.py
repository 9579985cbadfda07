"""Rights, through the Python client and the `cairn` command: a `member` cannot cancel another
member's job and a `lead` can; an `org_admin` acts only for its own org's sites and admins;
only a project admin creates studies. Every refusal is `PermissionDenied` (exit 5) and
changes nothing; each has a positive control that the same act by the right person works."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cairn.client import Client
from cairn.errors import PermissionDenied
from cairn.runtime.embedded import EmbeddedFederation
from tests.fixtures.federation import connect
from tests.integration.cli_run import cairn
from tests.integration.cp_helpers import worker_files, write_job

ORG_A = "org-site-a"
PEOPLE = {"alice@a": "member", "bob@a": "member", "lee@a": "lead", "ann@a": "org_admin"}
HELD = '''\
import os, time
with open("started", "a") as f:  # its own folder: the only place of the host it sees
    f.write(f"{os.getpid()}\\n")
time.sleep(600)  # until cancelled
'''


@asynccontextmanager
async def as_actor(fed: EmbeddedFederation, actor: str) -> AsyncIterator[Client]:
    c = await connect(fed, actor=actor)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def people(federation: EmbeddedFederation, client: Client) -> dict[str, str]:
    for name, role in PEOPLE.items():
        await client.study_add_admin(name, ORG_A, role)
    return PEOPLE


async def _held_job(fed: EmbeddedFederation, actor: str, job_dir: Path) -> str:
    spec = write_job(job_dir, name="held", script=HELD)
    async with as_actor(fed, actor) as c:
        job_id = await c.submit(spec)
    await worker_files(fed, job_id, "started", 2)  # a worker at site-a and one at site-b
    return job_id


async def test_a_member_cannot_cancel_another_members_job_and_a_lead_can(
        federation: EmbeddedFederation, people: dict[str, str], job_dir: Path) -> None:
    job_id = await _held_job(federation, "alice@a", job_dir)
    async with as_actor(federation, "bob@a") as bob:
        with pytest.raises(PermissionDenied):
            await bob.cancel(job_id)
        code, out, err = await cairn(federation, "job", "cancel", job_id, study="demo",
                                     actor="bob@a")
        assert code == 5, (out, err)
        assert "bob@a" in err and "Traceback" not in err
        # The refusals changed nothing: no cancel was even asked for.
        job = await bob.job(job_id)
        assert job.state == "running" and not job.cancel_requested
    async with as_actor(federation, "lee@a") as lee:
        await lee.cancel(job_id)
        final = await lee.wait(job_id, timeout=60)
    assert final.state in ("aborted", "failed") and final.cancel_requested, final
    assert {w.cause for w in final.workers.values()} == {"cancelled"}


async def test_a_member_cancels_its_own_job(federation: EmbeddedFederation,
                                            people: dict[str, str], job_dir: Path) -> None:
    job_id = await _held_job(federation, "bob@a", job_dir)
    code, out, err = await cairn(federation, "job", "cancel", job_id, study="demo",
                                 actor="bob@a")
    assert code == 0, (out, err)
    async with as_actor(federation, "bob@a") as bob:
        assert (await bob.wait(job_id, timeout=60)).cancel_requested


async def test_an_org_admin_acts_only_for_its_own_orgs_sites_and_admins(
        federation: EmbeddedFederation, people: dict[str, str]) -> None:
    async with as_actor(federation, "ann@a") as ann:
        with pytest.raises(PermissionDenied):
            await ann.study_remove_site("site-b")
        with pytest.raises(PermissionDenied):
            await ann.study_add_admin("mallory@b", "org-site-b", "lead")
        code, out, err = await cairn(federation, "study", "remove-site", "site-b",
                                     study="demo", actor="ann@a")
        assert code == 5, (out, err)
        study = await ann.study_show()
        assert "site-b" in study.sites and "mallory@b" not in study.admins
        # Its own org's: allowed.
        assert "carol@a" in (await ann.study_add_admin("carol@a", ORG_A, "member")).admins
        assert "site-a" not in (await ann.study_remove_site("site-a")).sites


async def test_only_a_project_admin_creates_studies(federation: EmbeddedFederation,
                                                    client: Client,
                                                    people: dict[str, str]) -> None:
    for actor in ("lee@a", "ann@a", "alice@a"):
        async with as_actor(federation, actor) as c:
            with pytest.raises(PermissionDenied):
                await c.study_create(f"by-{actor.split('@')[0]}", ["site-a"], [])
        code, out, err = await cairn(federation, "study", "create", "by-cli", "--site",
                                     "site-a", study="demo", actor=actor)
        assert code == 5, (actor, out, err)
    assert not [s.name for s in await client.study_list() if s.name.startswith("by-")]
    created = await client.study_create("by-admin", ["site-a"], [])
    assert created.name == "by-admin"
