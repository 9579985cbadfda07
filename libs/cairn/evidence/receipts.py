"""Checking why a site was trusted with a job: each gated deploy command's receipt, verified
against a trust list, with the evidence it names."""

from __future__ import annotations

from typing import Any

from cairn import subjects
from cairn.bus import Bus, replay
from cairn.errors import InvalidInput
from cairn.events import STUDY_DECODER, DeployCommand
from cairn.evidence.keys import VerifyingKey
from cairn.evidence.trust import TrustList
from cairn.evidence.vsa import verify_receipt


async def job_receipts(bus: Bus, study: str, job: str, trust: TrustList) -> list[dict[str, Any]]:
    """One row per deploy command of `job`: its receipt verified against `trust`."""
    keys = {k: v for k, v in trust.keys().items() if k not in trust.revoked}
    rows: list[dict[str, Any]] = []
    async for item in replay(bus, subjects.study_stream(study).name, STUDY_DECODER,
                             filters=[subjects.study_all(study)]):
        deploy = item.event
        if isinstance(deploy, DeployCommand) and deploy.job == job:
            rows.append(receipt_row(deploy, keys, trust))
    return rows


def receipt_row(deploy: DeployCommand, keys: dict[str, VerifyingKey],
                trust: TrustList) -> dict[str, Any]:
    """The deploy's receipt checked: verified or not, by whom, the evidence it names."""
    row: dict[str, Any] = {"site": deploy.site, "role": deploy.role, "verified": False,
                           "by": None, "evidence": None, "verified_at": None, "detail": ""}
    if deploy.receipt is None:
        row["detail"] = "no receipt (the job does not require a recipe, or no receipt key)"
        return row
    try:
        statement = verify_receipt(deploy.receipt, keys)
    except InvalidInput as exc:
        row["detail"] = exc.message
        return row
    signer_ids = [s.get("keyid", "") for s in deploy.receipt.get("signatures", [])]
    by = next((trust.signers[k].name for k in signer_ids if k in trust.signers), None)
    row.update(verified=True, by=by, evidence=statement.subject[0].digest.get("sha256"),
               verified_at=statement.predicate.time_verified.isoformat(),
               detail=f"{statement.predicate.verification_result} "
                      f"{', '.join(statement.predicate.verified_levels)}")
    return row
