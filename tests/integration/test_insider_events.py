"""An insider's forged events change nothing, live or after a restart at the worst moment.

Each forgery is published by a participant on a subject the broker lets it write (its own
site's job events), with content that belongs elsewhere: membership of another study, the
revocation of the hub or of another site's worker, the end of a job. The authority, the
coordinator and every other service check each event against its subject before folding it
(`cairn.subjects.misplaced`), so none of them is ever applied.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cairn import subjects
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.cp_helpers import dead_letters
from tests.integration.insiders import (
    admin_of,
    held_job,
    insiders,
    kit,
    restart_authority,
    until_running,
    wait_for,
)
from tests.integration.security_helpers import connect_as, js_allowed

__all__ = ["insiders"]

AT = datetime(2026, 1, 1, tzinfo=UTC).isoformat()


def _forged(kind: str, **fields: Any) -> bytes:
    return json.dumps({"type": kind, "id": f"forged-{kind}-{fields.get('job', '')}",
                       "at": AT, "source": "coordinator@hub", **fields}).encode()


async def _may_read(fed: EmbeddedFederation, who: str, study: str) -> bool:
    """Whether `who` may read the study's stream: the server answers, or refuses."""
    probe = await connect_as(fed, kit(fed, who))
    try:
        return await js_allowed(probe, f"$JS.API.STREAM.INFO.STUDY_{study}")
    finally:
        await probe.close()


async def _hub_is_in(fed: EmbeddedFederation) -> bool:
    probe = await connect_as(fed, kit(fed, "hub"))
    await probe.close()
    return True


async def test_a_sites_forgeries_rewrite_no_membership_and_revoke_no_one(
        insiders: EmbeddedFederation, tmp_path: Path) -> None:
    fed = insiders
    alpha = await admin_of(fed, "alpha")
    marker = tmp_path / "release"
    try:
        assert not await _may_read(fed, "site-b", "alpha")
        job = await alpha.submit(held_job(tmp_path / "job", marker))
        await until_running(alpha, job)
        site_b = await connect_as(fed, kit(fed, "site-b"))
        site_c = await connect_as(fed, kit(fed, "site-c"))
        try:
            # site-b (beta only) adds itself to alpha, on its own subject in beta.
            own_b = subjects.job_site("beta", "j-x", "site-b", "exited")
            await site_b.nc.publish(own_b, _forged("study.site-added", study="alpha",
                                                   site="site-b"))
            # ... and revokes the hub.
            await site_b.nc.publish(own_b, _forged(
                "worker.exited", study="beta", job="j-x", site="site-b", role="client",
                launch_id="hub", exit_code=0))
            # site-c (in alpha) cuts off site-a's running worker, on its own subject.
            await site_c.nc.publish(subjects.job_site("alpha", job, "site-c", "exited"),
                                    _forged("worker.exited", study="alpha", job=job,
                                            site="site-a", role="client",
                                            launch_id=f"{job}/site-a/client/0/0",
                                            exit_code=1))
            await site_b.nc.flush(timeout=5)
            await site_c.nc.flush(timeout=5)
            assert not site_b.errors and not site_c.errors, "these subjects are their own"
        finally:
            await site_b.close()
            await site_c.close()

        async def reported() -> bool:
            return len([d for d in await dead_letters(fed)
                        if "not its owner's" in d.error]) >= 3
        await wait_for(reported, "the coordinator dead-letters the three forgeries")
        marker.touch()
        final = await alpha.wait(job, timeout=90)
        # The worker was not cut off: it reported its result after the forgery, and the
        # genuine end of it came through the same channel the forgeries did.
        assert final.state == "completed", final.cause
        assert [r.value for r in final.results] == [{"finished": True}]
        assert await _hub_is_in(fed)
        assert not await _may_read(fed, "site-b", "alpha")
        letters = [d for d in await dead_letters(fed) if "not its owner's" in d.error]
        assert len(letters) == 3, [d.error for d in letters]  # each reported once

        await restart_authority(fed)
        # Replayed from the streams, the forgeries are still nothing.
        assert await _hub_is_in(fed)
        assert not await _may_read(fed, "site-b", "alpha")
        assert await _may_read(fed, "site-a", "alpha")
        assert len([d for d in await dead_letters(fed) if "not its owner's" in d.error]) == 3
    finally:
        await alpha.close()


async def test_forged_job_ends_and_membership_are_ignored_by_a_restarted_coordinator(
        insiders: EmbeddedFederation, tmp_path: Path) -> None:
    fed = insiders
    alpha = await admin_of(fed, "alpha")
    marker = tmp_path / "release"
    try:
        job = await alpha.submit(held_job(tmp_path / "job", marker))
        await until_running(alpha, job)
        site_c = await connect_as(fed, kit(fed, "site-c"))
        try:
            await site_c.nc.publish(subjects.job_site("alpha", job, "site-c", "exited"),
                                    _forged("job.completed", study="alpha", job=job))
            await site_c.nc.publish(subjects.job_site("alpha", job, "site-c", "accepted"),
                                    _forged("study.site-removed", study="alpha",
                                            site="site-a"))
            await site_c.nc.flush(timeout=5)
        finally:
            await site_c.close()

        async def stored() -> bool:
            return len([d for d in await dead_letters(fed) if d.stream == "STUDY_alpha"
                        and "not its owner's" in d.error]) == 2
        await wait_for(stored, "both forgeries are stored (and dead-lettered)")
        # The worst moment: the coordinator dies with the forgeries in its stream.
        fed.kill("coordinator")
        fed.respawn("coordinator")
        await fed.wait_healthy(90)
        assert (await alpha.job(job)).state == "running"
        assert "site-a" in (await alpha.study_show()).sites
        marker.touch()
        final = await alpha.wait(job, timeout=90)
        assert final.state == "completed", final.cause
        assert [r.value for r in final.results] == [{"finished": True}]
    finally:
        await alpha.close()
