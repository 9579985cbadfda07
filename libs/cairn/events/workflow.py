"""What a job asks of its federated rounds (`workflow:` in job.yaml) and what leaves a site.

These are wire types: `job.submitted` carries a `WorkflowRequest`, a deploy command the
job's `PrivacyRule`, and a site's `deployment.accepted` the privacy rule that site enforces
(its own rule merged with the job's, the site's winning; see `cairn.spec.privacy`). The
numbers themselves are checked where the files are read (`cairn.spec.workflow`).
"""

from __future__ import annotations

from typing import Any

import msgspec


class DPRule(msgspec.Struct, frozen=True, kw_only=True):
    """Differential privacy on a site's update: clip, then add Gaussian noise.

    Attributes:
        clip: The L2 norm a site's update (its model minus the model it received) is clipped
            to: the sensitivity of one release.
        noise_multiplier: z; the noise added to every coordinate has standard deviation
            `z * clip`.
        delta: The delta of the (epsilon, delta) guarantee the accountant reports.
    """

    clip: float
    noise_multiplier: float
    delta: float = 1e-5


class PrivacyRule(msgspec.Struct, frozen=True, kw_only=True):
    """Filters on what leaves a site, applied by the worker SDK before an update is sent.

    Attributes:
        dp: Clipping and Gaussian noise, or None for none.
        dp_off: The job turns differential privacy off explicitly (`dp: false`); a site
            that requires it refuses such a job. Only a job's rule sets it.
        exclude: Parameter names (dotted, fnmatch patterns: `bn.*`, `*.running_mean`) that
            never leave the site: the update carries the received value for them instead.
    """

    dp: DPRule | None = None
    dp_off: bool = False
    exclude: list[str] = []


class WorkflowRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The job's federated workflow, by name (docs/workflows.md).

    Attributes:
        name: One of `cairn.spec.workflow.WORKFLOWS` (fedavg, fedprox, fedadam, ...).
        params: The workflow's own parameters (checked against its declared ones).
        rounds: Federated rounds; None: the job's `params.rounds`, else 3.
        min_sites: Answers a round needs; None: the client role's `min_sites`, else 1.
        round_timeout_s: How long a round waits for answers; None: 60 s.
        cross_site_eval: After the last round, every site evaluates every site's model and
            the global one; the matrix is in the server's result.
        privacy: The job's own privacy filters (a site's rule wins over them).
    """

    name: str = "fedavg"
    params: dict[str, Any] = {}
    rounds: int | None = None
    min_sites: int | None = None
    round_timeout_s: float | None = None
    cross_site_eval: bool = False
    privacy: PrivacyRule | None = None
