"""Checking why a site was trusted with a job: each gated deploy command's receipt, verified
against a trust list, with the evidence it names.

Only roles placed on sites are gated (`role_gated`): the hub is the federation's own, so a
server role's dispatch carries no receipt and is reported as `not-gated`, never as missing.
"""

from __future__ import annotations

from typing import Any, Literal

from cairn import subjects
from cairn.bus import Bus, replay
from cairn.errors import InvalidInput
from cairn.events import STUDY_DECODER, DeployCommand, JobSubmitted, RecipeRequirement, RoleRequest
from cairn.evidence.keys import VerifyingKey
from cairn.evidence.trust import TrustList
from cairn.evidence.vsa import verify_receipt

ReceiptStatus = Literal["verified", "not-gated", "missing", "invalid"]
"""`verified`: a trusted key signed it; `not-gated`: the role needs no evidence (a hub role, or
a job that requires no recipe); `missing`: a gated dispatch without one; `invalid`: it does
not verify."""


def role_gated(requires: RecipeRequirement | None, role: RoleRequest) -> bool:
    """Whether a role's sites must hold evidence: a job that requires a recipe, for every role
    placed on sites (the hub's roles run on the federation's own site)."""
    return requires is not None and role.placement != "hub"


async def job_receipts(bus: Bus, study: str, job: str,
                       trust: TrustList) -> tuple[JobSubmitted | None, list[dict[str, Any]]]:
    """The job's submission (None when the study has no such job) and one row per deploy
    command of it: its receipt verified against `trust`, or why there is none to verify."""
    keys = {k: v for k, v in trust.keys().items() if k not in trust.revoked}
    submitted: JobSubmitted | None = None
    rows: list[dict[str, Any]] = []
    async for item in replay(bus, subjects.study_stream(study).name, STUDY_DECODER,
                             filters=[subjects.study_all(study)]):
        event = item.event
        if isinstance(event, JobSubmitted) and event.job == job:
            submitted = event
        elif isinstance(event, DeployCommand) and event.job == job:
            rows.append(receipt_row(event, keys, trust,
                                    ungated=why_ungated(submitted, event.role)))
    return submitted, rows


def why_ungated(submitted: JobSubmitted | None, role: str) -> str | None:
    """Why `role`'s dispatches need no receipt, or None when they are gated."""
    if submitted is None:
        return None  # a deploy with no submission on record: nothing says it was not gated
    if submitted.requires is None:
        return "not gated: the job requires no recipe"
    request = next((r for r in submitted.roles if r.name == role), None)
    if request is not None and not role_gated(submitted.requires, request):
        return "not gated: the role runs on the hub, the federation's own site"
    return None


def receipt_row(deploy: DeployCommand, keys: dict[str, VerifyingKey], trust: TrustList, *,
                ungated: str | None = None) -> dict[str, Any]:
    """The deploy's receipt checked: its status, by whom, the evidence it names. `ungated`
    says why the dispatch needs no receipt (None: it is gated)."""
    row: dict[str, Any] = {"site": deploy.site, "role": deploy.role, "rank": deploy.rank,
                           "gated": ungated is None, "status": "missing", "verified": False,
                           "by": None, "evidence": None, "verified_at": None, "detail": ""}
    if deploy.receipt is None:
        if ungated is not None:
            row.update(status="not-gated", detail=ungated)
        else:
            row["detail"] = ("no receipt on a gated dispatch (the coordinator signs none "
                             "without an evidence_key)")
        return row
    try:
        statement = verify_receipt(deploy.receipt, keys)
    except InvalidInput as exc:
        row.update(status="invalid", detail=exc.message)
        return row
    signer_ids = [s.get("keyid", "") for s in deploy.receipt.get("signatures", [])]
    by = next((trust.signers[k].name for k in signer_ids if k in trust.signers), None)
    row.update(status="verified", verified=True, by=by,
               evidence=statement.subject[0].digest.get("sha256"),
               verified_at=statement.predicate.time_verified.isoformat(),
               detail=f"{statement.predicate.verification_result} "
                      f"{', '.join(statement.predicate.verified_levels)}")
    return row


def receipts_hold(rows: list[dict[str, Any]]) -> bool:
    """Every gated dispatch has a receipt that verifies (ungated ones need none)."""
    return all(r["status"] in ("verified", "not-gated") for r in rows)
