"""study_runtime.yaml and the site policy decisions made from it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cairn.errors import InvalidInput, InvalidName
from cairn.spec import (
    Cause,
    Resources,
    StudyRuntime,
    StudyUsage,
    check_deployment,
    image_approved,
    load_study_runtime,
)
from cairn.spec.runtime import parse_study_runtime

EXAMPLE = """\
format: 1
studies:
  lung-cancer:
    images:
      default: registry.site-a/cairn-worker:1.0
      approved: ["registry.site-a/*", "registry.example/fl/*@sha256:*"]
    datasets:
      ct-scans: {source: /srv/data/ct, mode: ro}   # mounted at $CAIRN_DATA/ct-scans
    env: {TZ: UTC}
    secret_env:
      DB_PASSWORD: {source: env:SITE_DB_PASSWORD}    # or file:/path, or k8s:secret/key
    limits: {gpus: 4, cpus: 16, memory: 64Gi, concurrent_jobs: 2}
    docker: {network: host, shm_size: 1g}
    kubernetes: {namespace: lung, service_account: cairn-worker, node_selector: {}, \
tolerations: [], pod_template: lung-pod.yaml}
    slurm: {partition: gpu, account: lung, qos: normal, time: "02:00:00", sandbox: none}
  validation:                                        # reserved study: recipe check jobs
    images: {default: registry.site-a/cairn-checks:1.0}
    limits: {gpus: 8, cpus: 64, memory: 512Gi, concurrent_jobs: 1}
"""

DIGEST = "@sha256:" + "ab" * 32
FILE = "/etc/cairn/local/study_runtime.yaml"
GI = 2**30


def runtime(text: str = EXAMPLE) -> StudyRuntime:
    return parse_study_runtime(textwrap.dedent(text), "study_runtime.yaml", Path("/etc/cairn"))


def error(text: str, cls: type[InvalidInput] = InvalidInput) -> InvalidInput:
    with pytest.raises(cls) as info:
        runtime(text)
    return info.value


def test_the_jobspec_example_parses(tmp_path: Path) -> None:
    (tmp_path / "rt.yaml").write_text(EXAMPLE)
    loaded = load_study_runtime(tmp_path / "rt.yaml")
    lung = loaded.studies["lung-cancer"]
    assert lung.images.default == "registry.site-a/cairn-worker:1.0"
    assert lung.datasets["ct-scans"].mode == "ro"
    assert lung.secret_env["DB_PASSWORD"].kind == "env"
    assert lung.secret_env["DB_PASSWORD"].ref == "SITE_DB_PASSWORD"
    assert (lung.limits.gpus, lung.limits.millicpus, lung.limits.memory_bytes) == (
        4,
        16000,
        64 * GI,
    )
    assert lung.limits.concurrent_jobs == 2
    assert lung.kubernetes is not None
    assert lung.kubernetes.pod_template == str(tmp_path.resolve() / "lung-pod.yaml")
    assert lung.slurm is not None and lung.slurm.time == "02:00:00"
    assert loaded.studies["validation"].limits.memory_bytes == 512 * GI


@pytest.mark.parametrize(
    ("old", "new", "field", "line", "says"),
    [
        ("format: 1", "format: 2", "format", 1, "format 2 is not known"),
        (
            "env: {TZ: UTC}",
            "env: {CAIRN_DATA: /x}",
            "studies.lung-cancer.env.CAIRN_DATA",
            9,
            "shadow the worker contract",
        ),
        (
            "env: {TZ: UTC}",
            "env: {TZ: UTC, DB_PASSWORD: x}",
            "studies.lung-cancer.secret_env.DB_PASSWORD",
            11,
            "also set in env",
        ),
        (
            "env:SITE_DB_PASSWORD",
            "vault:x",
            "studies.lung-cancer.secret_env.DB_PASSWORD.source",
            11,
            "use env:VAR",
        ),
        (
            "mode: ro",
            "mode: rx",
            "studies.lung-cancer.datasets.ct-scans.mode",
            8,
            "invalid enum value",
        ),
        (
            "/srv/data/ct",
            "data/ct",
            "studies.lung-cancer.datasets.ct-scans.source",
            8,
            "absolute path",
        ),
        (
            "memory: 64Gi",
            "memory: 64 gigs",
            "studies.lung-cancer.limits.memory",
            12,
            "not a memory quantity",
        ),
        (
            "sandbox: none",
            "sandbox: none, gres: gpu",
            "studies.lung-cancer.slurm.gres",
            15,
            "unknown field",
        ),
        (
            "default: registry.site-a/cairn-worker:1.0",
            "default: 'bad image'",
            "studies.lung-cancer.images.default",
            5,
            "not an image reference",
        ),
    ],
)
def test_errors_name_file_line_and_field(
    old: str, new: str, field: str, line: int, says: str
) -> None:
    exc = error(EXAMPLE.replace(old, new))
    assert (exc.file, exc.field, exc.line) == ("study_runtime.yaml", field, line)
    assert says.lower() in exc.message.lower()


@pytest.mark.parametrize("bad", ["s1.>", "*", "A", "a.b"])
@pytest.mark.parametrize(
    ("old", "field"),
    [("lung-cancer:", "studies.{}"), ("ct-scans:", "studies.lung-cancer.datasets.{}")],
)
def test_bad_study_and_dataset_names(bad: str, old: str, field: str) -> None:
    exc = error(EXAMPLE.replace(old, f"'{bad}':"), InvalidName)
    assert exc.field == field.format(bad) and exc.line is not None


# --- image approval ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        (None, True),  # the study's default image
        ("registry.site-a/cairn-worker:1.0", True),
        ("registry.site-a/team/any:2", True),
        ("registry.example/fl/numpy" + DIGEST, True),
        ("registry.example/fl/numpy:1.2" + DIGEST, True),
        ("registry.example/fl/numpy:1.2", False),  # digest pinning required
        ("registry.example/fl/numpy@sha256:abc", False),  # not a real digest
        ("registry.site-a.evil.example/x:1", False),
        ("docker.io/library/python:3.11", False),
    ],
)
def test_image_approval(image: str | None, ok: bool) -> None:
    assert image_approved(image, runtime().studies["lung-cancer"])[0] is ok


def test_an_unpinned_image_is_told_to_pin() -> None:
    ok, reason = image_approved("registry.example/fl/numpy:1.2", runtime().studies["lung-cancer"])
    assert not ok and "requires pinning by digest" in reason


def test_no_image_and_no_default_runs_the_sites_own_way() -> None:
    text = EXAMPLE.replace("{default: registry.site-a/cairn-checks:1.0}", "{}")
    policy = runtime(text).studies["validation"]
    ok, reason = image_approved(None, policy)
    assert ok and "site's own runtime" in reason


# --- deployment decisions -----------------------------------------------------------------


def decide(
    request: Resources,
    image: str | None = None,
    usage: StudyUsage | None = None,
    study: str = "lung-cancer",
    job: str | None = "j-1",
) -> tuple[Cause | None, str]:
    d = check_deployment(FILE, runtime(), study, request, image, usage or StudyUsage(), job=job)
    assert d.accepted is (d.cause is None)
    return d.cause, d.message


SMALL = Resources(gpus=1, millicpus=2000, memory_bytes=8 * GI)


def test_a_fitting_request_is_accepted() -> None:
    assert decide(SMALL)[0] is None


def test_a_study_missing_from_the_file_is_site_policy() -> None:
    cause, message = decide(SMALL, study="brain")
    assert cause is Cause.SITE_POLICY and FILE in message and "'brain'" in message
    d = check_deployment(FILE, None, "brain", SMALL, None, StudyUsage())
    assert d.cause is Cause.SITE_POLICY and FILE in d.message


def test_an_unapproved_image_is_refused() -> None:
    cause, message = decide(SMALL, image="docker.io/library/python:3.11")
    assert cause is Cause.IMAGE_NOT_APPROVED and "python:3.11" in message


def test_a_request_alone_over_the_limit() -> None:
    cause, message = decide(Resources(gpus=5, millicpus=1000, memory_bytes=GI))
    assert cause is Cause.OVER_STUDY_LIMIT
    assert "asks for 5 gpus" in message and "limit of 4" in message


def test_a_request_plus_usage_over_the_limit() -> None:
    usage = StudyUsage(
        resources=Resources(gpus=0, millicpus=1000, memory_bytes=60 * GI),
        jobs=frozenset({"j-0"}),
    )
    cause, message = decide(SMALL, usage=usage)
    assert cause is Cause.OVER_STUDY_LIMIT
    assert "asks for 8Gi memory" in message and "already uses 60Gi of its 64Gi" in message


def test_concurrent_jobs_count_jobs_not_workers() -> None:
    busy = StudyUsage(jobs=frozenset({"j-0", "j-1"}))
    cause, message = decide(SMALL, usage=busy, job="j-2")
    assert cause is Cause.OVER_STUDY_LIMIT and "2 concurrent jobs" in message
    # A second role of a job already running here is not another concurrent job.
    assert decide(SMALL, usage=busy, job="j-1")[0] is None


def test_causes_are_the_closed_set() -> None:
    assert {c.value for c in Cause} == {
        "site-policy",
        "image-not-approved",
        "over-study-limit",
        "launch-failed",
        "crashed",
        "oom",
        "timeout",
        "cancelled",
        "outlived-server",
        "site-lost",
        "too-few-sites",
        "unschedulable",
        "allocation-mismatch",
        "infrastructure",
    }


def test_trusted_code_is_off_unless_written() -> None:
    assert runtime().studies["lung-cancer"].trusted_code is False
    marked = runtime("format: 1\nstudies:\n  lung-cancer: {trusted_code: true}\n")
    assert marked.studies["lung-cancer"].trusted_code is True


def test_trusted_code_is_a_boolean() -> None:
    err = error("format: 1\nstudies:\n  lung-cancer: {trusted_code: maybe}\n")
    assert "trusted_code" in str(err) and err.line == 3
