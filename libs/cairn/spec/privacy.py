"""Whose privacy filters apply at a site: the site's rule wins over the job's.

A site declares filters for a study in its `local/study_runtime.yaml` (`privacy:`); a job may
declare its own (`workflow.privacy`). At the site both apply, and where they differ the
stricter one: the smaller clip, the larger noise multiplier, the smaller delta, every
excluded name of either. A job that turns differential privacy off (`dp: false`) where the
site requires it is refused there (cause `site-policy`): the site's requirement is never
silently weakened, and the job's author learns it before any update is computed.
"""

from __future__ import annotations

from pathlib import Path

from cairn.events.workflow import DPRule, PrivacyRule


def refusal(site: PrivacyRule | None, job: PrivacyRule | None, *, policy_file: str | Path,
            study: str) -> str | None:
    """Why the site refuses the job's privacy request, or None when it does not."""
    if site is None or site.dp is None or job is None or not job.dp_off:
        return None
    dp = site.dp
    return (f"this site requires differential privacy for study {study!r} (clip "
            f"{dp.clip:g}, noise multiplier {dp.noise_multiplier:g}; studies.{study}.privacy"
            f".dp in {policy_file}), and the job turns it off (workflow.privacy.dp: false)")


def effective(site: PrivacyRule | None, job: PrivacyRule | None) -> PrivacyRule | None:
    """The filters the site enforces; None when neither side asks for any."""
    if site is None and job is None:
        return None
    site = site or PrivacyRule()
    job = job or PrivacyRule()
    dp = site.dp
    if job.dp is not None:
        dp = job.dp if dp is None else DPRule(
            clip=min(dp.clip, job.dp.clip),
            noise_multiplier=max(dp.noise_multiplier, job.dp.noise_multiplier),
            delta=min(dp.delta, job.dp.delta))
    exclude = list(dict.fromkeys([*site.exclude, *job.exclude]))
    if dp is None and not exclude:
        return None
    return PrivacyRule(dp=dp, exclude=exclude)
