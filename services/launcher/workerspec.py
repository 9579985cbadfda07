"""What a worker is given: the backend's `LaunchSpec` for a launch request the guard let
through, with the worker's environment contract, its secrets (resolved here, on the site)
and, in a secure federation, its job-lifetime credential."""

from __future__ import annotations

import os
from pathlib import Path

from cairn import telemetry
from cairn.bus import Bus
from cairn.events import LaunchRequested, worker_ref
from cairn.launcher.backends._env import contract_env
from cairn.launcher.backends.base import LaunchSpec
from cairn.launcher.inputs import code_bundle, resolve_secrets
from cairn.spec.site import SiteConfig

TRACING_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG")
"""What a launcher that traces hands its workers, so their spans land beside its own."""


def worker_nats_url(site_cfg: SiteConfig, launcher_url: str | None) -> str:
    """site.yaml's `worker_nats_url`; where it names none of its own, the URL the launcher was
    given (`CAIRN_NATS_URL` and `--nats-url` win over site.yaml's `federation`): a NATS port
    changed in one place moves the workers with their parent."""
    if site_cfg.worker_nats_url != site_cfg.federation:
        return site_cfg.worker_nats_url
    return launcher_url or site_cfg.worker_nats_url


async def worker_spec(bus: Bus, req: LaunchRequested, *, site_cfg: SiteConfig,
                      creds: str | None, tls_ca: str | None,
                      launcher_url: str | None = None,
                      trusted_code: bool = False) -> LaunchSpec:
    """The spec the backend launches (unpacks the code bundle, mints the credential).

    Raises:
        InvalidInput: the code bundle is missing, or a secret cannot be read.
    """
    site = site_cfg.site
    code_dir = await code_bundle(bus, Path(site_cfg.workdir), req.study or "", req.code_digest)
    # A Kubernetes Secret is mounted into the pod by the cluster: never read here.
    own, mounted = dict(req.secret_refs), {}
    if site_cfg.backend == "kubernetes":
        mounted = {k: v for k, v in own.items() if v.startswith("k8s:")}
        own = {k: v for k, v in own.items() if k not in mounted}
    # The request was checked against this site's own subject: its site is this one.
    ref, study = worker_ref(req), req.study or ""
    env = contract_env(ref, study=study, nats_url=worker_nats_url(site_cfg, launcher_url),
                       params=req.params)
    # The job's trace goes on in the worker: W3C headers as env, and where this launcher
    # exports spans, the worker exports to the same place, sampled the same way.
    for header, value in telemetry.current_headers().items():
        env[header.upper()] = value
    if telemetry.enabled():
        env.update({k: v for k in TRACING_ENV if (v := os.environ.get(k))})
    return LaunchSpec(
        **ref.launch_fields(study, req.launch_id), entrypoint=req.entrypoint,
        code_dir=str(code_dir), env=env, study_env=dict(req.env),
        secret_env={**resolve_secrets(own), **worker_creds(req, site, creds, tls_ca)},
        secret_refs=mounted,
        datasets=dict(req.datasets),
        gpus=list(req.gpus), millicpus=req.resources.millicpus,
        memory_bytes=req.resources.memory_bytes, timeout_s=req.timeout_s or None,
        image=req.image or "", platform=dict(req.platform or {}),
        gpus_requested=req.resources.gpus, nodes=req.nodes, trusted_code=trusted_code)


def worker_creds(req: LaunchRequested, site: str, creds: str | None,
                 tls_ca: str | None) -> dict[str, str]:
    """In a secure federation, the worker's job-lifetime credential (secret files)."""
    if not creds:
        return {}
    from cairn.trust.workers import worker_secrets

    return worker_secrets(creds, tls_ca, study=req.study or "", job=req.job, site=site,
                          role=req.role, attempt=req.attempt, launch_id=req.launch_id,
                          timeout_s=req.timeout_s or None)
