"""Running a recipe check as an ordinary job on the site, under the reserved study
`validation`, and reading its result back from the worker logs the launcher captured.

A check that needs a GPU on a site that declares none is skipped without a job (the site
could not hand the job a GPU anyway); every other check runs, and a check that cannot run
where it landed (no Slurm, no torch) reports `skipped` itself, with its reason.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from cairn.checks import CheckReport, combine, parse_lines
from cairn.client import Client
from cairn.client.jobrequest import JobRequest
from cairn.errors import CairnError
from cairn.events import Resources, RoleRequest
from cairn.recipes import Catalog, Check
from cairn.spec.runtime import VALIDATION_STUDY
from cairn.validator.phases import CheckRun

log = logging.getLogger("cairn.validator")

DEFAULT_RANKS = {"gang-start": 2}
"""Checks that run as several workers of one job (roles `rank-0..N-1`); `with.ranks` wins."""
CHECK_RESOURCES = Resources(gpus=0, millicpus=500, memory_bytes=512 * 1024 * 1024)
QUEUE_TIMEOUT_S = 120.0
"""How long a check job may wait for the site's capacity (another job may hold it)."""
WAIT_MARGIN_S = 30.0
"""Beyond the check's own timeout: scheduling, launch and the exit report."""


def entrypoint(name: str) -> str:
    return f"python -m cairn.checks {name}"


def wants_gpus(check: str, needs_gpu: bool, site_gpus: int) -> int:
    """GPUs a check job asks for: all the site declares, for checks about GPUs."""
    return site_gpus if (needs_gpu or check == "accelerator-discovery") else 0


def job_request(check: Check, *, needs_gpu: bool, site: str, site_gpus: int, timeout_s: float,
                run: str) -> JobRequest:
    """The job for one check: one role `check`, or one role per rank for multi-rank checks."""
    with_ = dict(check.with_)
    ranks = int(with_.get("ranks", DEFAULT_RANKS.get(check.name, 1)) or 1)
    gpus = wants_gpus(check.name, needs_gpu, site_gpus)
    resources = Resources(gpus=gpus, millicpus=CHECK_RESOURCES.millicpus,
                          memory_bytes=CHECK_RESOURCES.memory_bytes)
    names = ["check"] if ranks == 1 else [f"rank-{i}" for i in range(ranks)]
    # One role per rank: the coordinator places one worker per role and site, and places a
    # job's roles all together or not at all, which is what a gang needs.
    roles = [RoleRequest(name=n, entrypoint=entrypoint(check.name), resources=resources,
                         sites=[site], min_sites=1) for n in names]
    params = {"check": check.name, "with": with_, "expected_gpus": gpus, "ranks": ranks,
              "run": run}
    return JobRequest(name=f"check-{check.name}", roles=roles, params=params,
                      timeout_s=timeout_s, queue_timeout_s=QUEUE_TIMEOUT_S)


class CheckJobs:
    """Runs checks for one validation run of one site."""

    def __init__(self, client: Client, catalog: Catalog, *, site: str, site_gpus: int,
                 run: str) -> None:
        self.client = client
        self.catalog = catalog
        self.site = site
        self.site_gpus = site_gpus
        self.run = run

    async def run_check(self, check: Check) -> CheckRun:
        definition = self.catalog.checks[check.name]
        if definition.needs_gpu and self.site_gpus == 0:
            return CheckRun(name=check.name, status="skipped",
                            message=f"needs a GPU; site {self.site} declares none")
        timeout = float(definition.timeout_seconds)
        if check.timeout:
            from cairn.recipes import parse_duration

            timeout = float(parse_duration(check.timeout))
        request = job_request(check, needs_gpu=definition.needs_gpu, site=self.site,
                              site_gpus=self.site_gpus, timeout_s=timeout, run=self.run)
        t0 = time.monotonic()
        try:
            job_id = await self.client.submit_request(request, study=VALIDATION_STUDY)
            final = await self.client.wait(job_id, timeout=timeout + QUEUE_TIMEOUT_S
                                           + WAIT_MARGIN_S)
            reports = await self._reports(job_id)
        except CairnError as exc:
            return CheckRun(name=check.name, status="error", message=str(exc),
                            duration_s=time.monotonic() - t0)
        combined = combine(check.name, reports, request.params)
        message = combined.message
        if not reports:
            message = (f"job {job_id} {final.state}" + (f" ({final.cause})" if final.cause else "")
                       + (f": {final.message}" if final.message else "")
                       + "; the check printed no result")
        log.info("check %s on %s: %s (%s)", check.name, self.site, combined.status, job_id)
        return CheckRun(name=check.name, status=combined.status, message=message,
                        readings=dict(combined.readings), duration_s=time.monotonic() - t0,
                        job=job_id, details=_details(combined, reports))

    async def _reports(self, job_id: str) -> list[CheckReport]:
        # Per worker: a line split across two chunks of one log must be joined again.
        logs: dict[tuple[str, int], list[bytes]] = {}
        async for chunk in self.client.logs(job_id, self.site):
            logs.setdefault((chunk.role, chunk.rank), []).append(chunk.data)
        return [report for parts in logs.values()
                for report in parse_lines(b"".join(parts).decode("utf-8", "replace"))]


def _details(combined: CheckReport, reports: list[CheckReport]) -> dict[str, Any]:
    details = dict(combined.details)
    if len(reports) > 1:
        details.setdefault("ranks_reported", len(reports))
    return details
