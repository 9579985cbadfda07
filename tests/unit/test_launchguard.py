"""The launcher's guard: a launch runs exactly its deploy command, with only what the site's
study_runtime.yaml gives the study. Requests are built as the agent builds them and sent
through the wire encoding, as the launcher receives them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from cairn.errors import PermissionDenied
from cairn.events import DatasetMount, DeployCommand, LaunchRequested, Resources, decode, encode
from cairn.spec.runtime import StudyRuntime, parse_study_runtime
from cairn.trust import launchguard

RUNTIME = """\
format: 1
studies:
  lung:
    images: {default: "reg.site/worker:1", approved: ["reg.site/*"]}
    datasets: {ct: {source: /srv/ct, mode: ro}}
    env: {TZ: UTC}
    secret_env: {DB: {source: "env:SITE_DB"}}
    docker: {network: host, shm_size: 1g}
    slurm: {partition: gpu, time: "02:00:00"}
    kubernetes:
      namespace: lung
      tolerations: [{key: gpu, operator: Exists}]
      image_pull_secrets: [regcred]
      pending_timeout: 10m
"""
BASE = {"at": "2026-01-01T00:00:00Z", "study": "lung"}


@pytest.fixture
def runtime() -> StudyRuntime:
    return parse_study_runtime(RUNTIME, "study_runtime.yaml", "/")


def _deploy(**changes: Any) -> DeployCommand:
    fields: dict[str, Any] = {
        **BASE, "id": "d1", "source": "coordinator@hub", "job": "j-1", "site": "site-a",
        "role": "client", "rank": 1, "attempt": 0, "entrypoint": "python -m app",
        "resources": Resources(gpus=2, millicpus=2000, memory_bytes=1 << 30),
        "code_digest": "ab" * 32, "params": {"lr": 0.1, "rounds": [1, 2]}, "timeout_s": 600.0}
    fields.update(changes)
    return msgspec.convert(fields, DeployCommand, from_attributes=True)


def _launch(deploy: DeployCommand, runtime: StudyRuntime, **changes: Any) -> LaunchRequested:
    """What the agent asks for `deploy`, as the launcher decodes it off the wire."""
    policy = runtime.studies["lung"]
    fields: dict[str, Any] = {
        **BASE, "id": "l1", "source": "agent@site-a",
        "launch_id": f"{deploy.job}/site-a/{deploy.role}/{deploy.rank}/{deploy.attempt}",
        "job": deploy.job, "site": "site-a", "role": deploy.role, "rank": deploy.rank,
        "attempt": deploy.attempt, "entrypoint": deploy.entrypoint,
        "resources": deploy.resources, "gpus": ["0", "1"],
        "image": deploy.image or policy.images.default, "code_digest": deploy.code_digest,
        "params": deploy.params, "env": dict(policy.env),
        "secret_refs": {k: v.source for k, v in policy.secret_env.items()},
        "datasets": {k: DatasetMount(source=v.source, mode=v.mode)
                     for k, v in policy.datasets.items()},
        "timeout_s": deploy.timeout_s, "platform": launchguard.platform_settings(policy),
        "nodes": deploy.nodes}
    fields.update(changes)
    request = LaunchRequested(**fields)
    decoded = decode(encode(request))
    assert isinstance(decoded, LaunchRequested)
    return decoded


def _check(req: LaunchRequested, deploy: DeployCommand, runtime: StudyRuntime) -> None:
    policy = launchguard.check_against_runtime(req, runtime)
    launchguard.check_against_deploy(req, deploy, default_image=policy.images.default)


def test_what_the_agent_asks_for_a_deploy_command_passes(runtime: StudyRuntime) -> None:
    deploy = _deploy()
    _check(_launch(deploy, runtime), deploy, runtime)
    named = _deploy(image="reg.site/other:2")
    _check(_launch(named, runtime), named, runtime)


@pytest.mark.parametrize(("field", "value"), [
    ("launch_id", "j-1/site-a/client/1/7"),  # a copy under a launch id of its own
    ("params", {"lr": 0.1, "rounds": [1, 2], "injected": True}),
    ("timeout_s", 6000.0),
    ("resources", Resources(gpus=2, millicpus=2000, memory_bytes=2 << 30)),
    ("entrypoint", "sh -c 'cat /etc/shadow'"),
    ("code_digest", "cd" * 32),
    ("image", "reg.site/other:2"),
    ("nodes", 4),
    ("rank", 0),
    ("attempt", 1),
    ("role", "server"),
    ("job", "j-2"),
    ("gpus", ["0", "1", "2"]),
    ("gpus", ["0", "0"]),
])
def test_anything_the_deploy_command_did_not_say_is_refused(
        runtime: StudyRuntime, field: str, value: object) -> None:
    deploy = _deploy()
    with pytest.raises(PermissionDenied) as refused:
        _check(_launch(deploy, runtime, **{field: value}), deploy, runtime)
    assert refused.value.field == field, refused.value


@pytest.mark.parametrize(("changes", "field"), [
    ({"datasets": {"ct": DatasetMount(source="/", mode="ro")}}, "datasets.ct"),
    ({"datasets": {"ct": DatasetMount(source="/srv/ct", mode="rw")}}, "datasets.ct"),
    ({"secret_refs": {"DB": "file:/etc/shadow"}}, "secret_env.DB"),
    ({"env": {"TZ": "UTC", "LD_PRELOAD": "/tmp/x.so"}}, "env.LD_PRELOAD"),
    ({"platform": {"docker": {"network": "host", "shm_size": "1g", "user": "0",
                              "runtime": None}}}, "platform"),
    ({"platform": {}}, "platform"),
    ({"image": "evil.example/miner:1"}, "image"),
    ({"study": "other"}, "study"),
])
def test_only_the_sites_own_resources_for_the_study(
        runtime: StudyRuntime, changes: dict[str, Any], field: str) -> None:
    deploy = _deploy(image=changes.get("image"))
    with pytest.raises(PermissionDenied) as refused:
        _check(_launch(deploy, runtime, **changes), deploy, runtime)
    assert refused.value.field == field, refused.value
