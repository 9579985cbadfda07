"""The Helm charts in deploy/helm, through the real helm (offline): lint and template with
default and with full values, every rendered object valid against the official schema, and
RBAC that grants exactly what the launcher's Kubernetes backend and the snapshotter use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cairn.launcher.backends.kubernetes_api import RBAC_RULES as LAUNCHER_RULES
from cairn.snapshot.collectors.k8s import RBAC_RULES as SNAPSHOTTER_RULES
from tests.fixtures.tools import helm, run_tool

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "deploy" / "helm"
KUBERNETES_VERSION = "1.32"
VALUES = ["default", "full"]


@pytest.fixture(scope="module")
def helm_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return helm(tmp_path_factory.mktemp("helm"))


def template(helm_bin: Path, chart: str, values: str, tmp_path: Path) -> list[dict[str, Any]]:
    args: list[str | Path] = [helm_bin, "template", "rel", CHARTS / chart, "--namespace", "cairn"]
    if values == "full":
        args += ["-f", CHARTS / chart / "ci" / "full-values.yaml"]
    done = run_tool(args, tmp_path / "home")
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("chart", ["cairn-federation", "cairn-site"])
def test_helm_lint_passes_with_default_and_full_values(helm_bin: Path, chart: str,
                                                        tmp_path: Path) -> None:
    for values in (None, CHARTS / chart / "ci" / "full-values.yaml"):
        args: list[str | Path] = [helm_bin, "lint", "--strict", CHARTS / chart]
        if values is not None:
            args += ["-f", values]
        done = run_tool(args, tmp_path / "home")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("chart", ["cairn-federation", "cairn-site"])
@pytest.mark.parametrize("values", VALUES)
def test_every_rendered_object_passes_the_official_schema(helm_bin: Path, chart: str,
                                                          values: str, tmp_path: Path) -> None:
    docs = template(helm_bin, chart, values, tmp_path)
    assert docs
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc}")


def test_the_values_schema_refuses_a_typo(helm_bin: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nats: {deplyo: true}\n")
    done = run_tool([helm_bin, "template", "rel", CHARTS / "cairn-federation", "-f", bad],
                    tmp_path / "home")
    assert done.returncode != 0 and "deplyo" in done.stderr


def _rules(doc: dict[str, Any]) -> list[dict[str, list[str]]]:
    return [{k: list(r[k]) for k in ("apiGroups", "resources", "verbs")} for r in doc["rules"]]


def test_site_rbac_grants_exactly_what_the_backends_use(helm_bin: Path, tmp_path: Path) -> None:
    docs = template(helm_bin, "cairn-site", "full", tmp_path)
    roles = [d for d in docs if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["brain", "lung"]
    for role in roles:
        assert _rules(role) == [dict(r) for r in LAUNCHER_RULES]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {b["roleRef"]["name"] for b in bindings} == {r["metadata"]["name"] for r in roles}
    (cluster_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert _rules(cluster_role) == [dict(r) for r in SNAPSHOTTER_RULES]
    verbs = {v for d in [*roles, cluster_role] for r in d["rules"] for v in r["verbs"]}
    assert "*" not in verbs and not verbs & {"update", "patch", "deletecollection"}
    # Default values: no study namespace beyond the one named, nothing cluster-wide but reads.
    defaults = template(helm_bin, "cairn-site", "default", tmp_path)
    assert [d["metadata"]["namespace"] for d in defaults if d["kind"] == "Role"] == ["cairn-work"]


def test_the_site_parent_runs_the_site_services_with_its_kit(helm_bin: Path,
                                                            tmp_path: Path) -> None:
    docs = template(helm_bin, "cairn-site", "full", tmp_path)
    (parent,) = [d for d in docs if d["kind"] == "Deployment"
                 and d["metadata"]["name"].endswith("-parent")]
    container = parent["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["run", "agent", "launcher", "snapshotter"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CAIRN_NATS_URL"] == "nats://rel-leaf:4222"  # the leaf node in the release
    assert env["CAIRN_CREDS"].startswith("/etc/cairn/kit/")
    assert env["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "site.yaml" in d["data"]]
    assert yaml.safe_load(config["data"]["site.yaml"])["site"] == "site-k8s"
    (leaf,) = [d for d in docs if d["kind"] == "ConfigMap" and "leaf.conf" in d["data"]]
    assert "tls://hub.example.org:7422" in leaf["data"]["leaf.conf"]


def test_the_federation_chart_runs_one_writer_per_service(helm_bin: Path,
                                                          tmp_path: Path) -> None:
    docs = template(helm_bin, "cairn-federation", "full", tmp_path)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deployments) == {"rel-coordinator", "rel-validator", "rel-signer",
                                "rel-authority"}
    for d in deployments.values():
        assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
        container = d["spec"]["template"]["spec"]["containers"][0]
        if d["metadata"]["name"] == "rel-authority":
            assert "tls://rel-nats:4222" in container["args"]
            continue
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["CAIRN_NATS_URL"] == "tls://rel-nats:4222"
        assert env["CAIRN_CREDS"] == "/etc/cairn/kit/hub.creds"  # the hub's kit
    signer = deployments["rel-signer"]["spec"]["template"]["spec"]["containers"][0]
    assert "evidence_key=/etc/cairn/signer/signer.key" in signer["args"]
    (nats,) = [d for d in docs if d["kind"] == "StatefulSet"]
    claim = nats["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "50Gi"
    external = run_tool([helm_bin, "template", "rel", CHARTS / "cairn-federation", "--set",
                         "nats.deploy=false", "--set", "nats.externalUrl=tls://nats.example:4222"],
                        tmp_path / "home")
    assert external.returncode == 0, external.stderr
    rendered = [d for d in yaml.safe_load_all(external.stdout) if d]
    assert not [d for d in rendered if d["kind"] == "StatefulSet"]
    assert "tls://nats.example:4222" in json.dumps(rendered)
