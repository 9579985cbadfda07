"""The Helm charts in deploy/helm, through the real helm (offline): lint and template with
default and with full values, every rendered object valid against the official schema, and
RBAC that grants exactly what the launcher's Kubernetes backend and the snapshotter use."""

from __future__ import annotations

import json
import shutil
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
# What "default" means per chart: its values.yaml, plus what it requires (the site chart
# renders nothing without its credentials).
DEFAULTS: dict[str, list[str | Path]] = {
    "cairn-federation": [],
    "cairn-site": ["-f", CHARTS / "cairn-site" / "ci" / "credentials-values.yaml"],
}


@pytest.fixture(scope="module")
def helm_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return helm(tmp_path_factory.mktemp("helm"))


def template(helm_bin: Path, chart: str, values: str, tmp_path: Path,
             *extra: str | Path) -> list[dict[str, Any]]:
    args: list[str | Path] = [helm_bin, "template", "rel", CHARTS / chart, "--namespace", "cairn"]
    args += ["-f", CHARTS / chart / "ci" / "full-values.yaml"] if values == "full" \
        else DEFAULTS[chart]
    done = run_tool([*args, *extra], tmp_path / "home")
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("chart", ["cairn-federation", "cairn-site"])
def test_helm_lint_passes_with_default_and_full_values(helm_bin: Path, chart: str,
                                                        tmp_path: Path) -> None:
    for values in (DEFAULTS[chart], ["-f", CHARTS / chart / "ci" / "full-values.yaml"]):
        args: list[str | Path] = [helm_bin, "lint", "--strict", CHARTS / chart, *values]
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
    assert env["CAIRN_JS_DOMAIN"] == "cairn"  # the federation's JetStream, from the leaf
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
                                "rel-authority", "rel-httpapi"}
    for d in deployments.values():
        assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
        container = d["spec"]["template"]["spec"]["containers"][0]
        if d["metadata"]["name"] == "rel-authority":
            assert "tls://rel-nats:4222" in container["args"]
            continue
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["CAIRN_NATS_URL"] == "tls://rel-nats:4222"
        # The hub's kit; the HTTP API's own narrow one (`Kind.API`), never the hub's.
        assert env["CAIRN_CREDS"] == ("/etc/cairn/kit/api.creds"
                                      if d["metadata"]["name"] == "rel-httpapi" else
                                      "/etc/cairn/kit/hub.creds")
    signer = deployments["rel-signer"]["spec"]["template"]["spec"]["containers"][0]
    assert "evidence_key=/etc/cairn/signer/signer.key" in signer["args"]
    # The HTTP API: HTTPS with the operator's certificate, behind a Service of its own.
    api = deployments["rel-httpapi"]["spec"]["template"]["spec"]["containers"][0]
    assert api["args"][:2] == ["run", "httpapi"]
    assert {"listen=0.0.0.0:8443", "tls_cert=/etc/cairn/api-tls/tls.crt"} <= set(api["args"])
    (kit,) = [v for v in deployments["rel-httpapi"]["spec"]["template"]["spec"]["volumes"]
              if v["name"] == "kit"]
    assert kit["secret"]["secretName"] == "api-kit"
    (service,) = [d for d in docs if d["kind"] == "Service"
                  and d["metadata"]["name"] == "rel-api"]
    assert service["spec"]["ports"][0]["port"] == 8443
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


# -- secure by default ----------------------------------------------------------------------

def _validated(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    return docs


def _refused(helm_bin: Path, chart: str, tmp_path: Path, *args: str) -> str:
    done = run_tool([helm_bin, "template", "rel", CHARTS / chart, *args], tmp_path / "home")
    assert done.returncode != 0, f"rendered with {args}"
    return done.stderr


def notes(helm_bin: Path, chart: str, tmp_path: Path, *args: str | Path) -> str:
    """NOTES.txt as `helm install` prints it. `helm template` never renders NOTES.txt, so a
    copy of the chart renders the same text into a ConfigMap of its own."""
    copy = tmp_path / "notes" / chart
    shutil.copytree(CHARTS / chart, copy)
    text = (copy / "templates" / "NOTES.txt").read_text()
    (copy / "templates" / "NOTES.txt").unlink()
    (copy / "templates" / "_notes_under_test.tpl").write_text(
        '{{- define "notes.under.test" -}}\n' + text + "{{- end -}}\n")
    (copy / "templates" / "notes-under-test.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-under-test}\n"
        'data: {NOTES.txt: {{ include "notes.under.test" . | quote }}}\n')
    done = run_tool([helm_bin, "template", "rel", copy, "--namespace", "cairn", *args,
                     "--show-only", "templates/notes-under-test.yaml"], tmp_path / "home")
    assert done.returncode == 0, done.stderr
    return str(yaml.safe_load(done.stdout)["data"]["NOTES.txt"])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_the_federation_renders_tls_and_the_authority_by_default(helm_bin: Path,
                                                                 tmp_path: Path) -> None:
    docs = _validated(template(helm_bin, "cairn-federation", "default", tmp_path))
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert "rel-authority" in deployments
    (nats,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (config,) = [v for v in nats["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    assert config == {"name": "config", "secret": {"secretName": "nats-provisioned"}}
    assert not [d for d in docs if d["kind"] == "ConfigMap" and "nats.conf" in d["data"]]
    for name in ("rel-coordinator", "rel-validator", "rel-signer"):
        pod = deployments[name]["spec"]["template"]["spec"]
        env = _env(pod["containers"][0])
        assert env["CAIRN_NATS_URL"] == "tls://rel-nats:4222"
        assert env["CAIRN_CREDS"] == "/etc/cairn/kit/hub.creds"
        assert env["CAIRN_TLS_CA"] == "/etc/cairn/kit/ca.pem"
        assert {"name": "kit", "secret": {"secretName": "hub-kit", "defaultMode": 0o400}} \
            in pod["volumes"]
    said = notes(helm_bin, "cairn-federation", tmp_path)
    assert "TLS and the authority are on" in said and "INSECURE" not in said
    for secret in ("hub-kit", "api-kit", "nats-provisioned", "federation-authority"):
        assert secret in said


def test_an_insecure_federation_takes_an_explicit_value_and_says_so(helm_bin: Path,
                                                                    tmp_path: Path) -> None:
    docs = _validated(template(helm_bin, "cairn-federation", "default", tmp_path,
                               "--set", "insecure=true"))
    assert not [d for d in docs if d["metadata"]["name"] == "rel-authority"]
    for d in docs:
        if d["kind"] == "Deployment":
            env = _env(d["spec"]["template"]["spec"]["containers"][0])
            assert env["CAIRN_NATS_URL"] == "nats://rel-nats:4222"
            assert "CAIRN_CREDS" not in env and "CAIRN_TLS_CA" not in env
    said = notes(helm_bin, "cairn-federation", tmp_path, "--set", "insecure=true")
    assert said.strip().startswith("WARNING: INSECURE DEVELOPMENT FEDERATION (insecure: true).")
    assert "without TLS and without authorization" in said


@pytest.mark.parametrize(("setting", "named"), [
    ("credentialsSecret=", "credentialsSecret is required"),
    ("nats.configSecret=", "nats.configSecret is required"),
    ("authority.secret=", "authority.secret is required"),
    ("api.credentialsSecret=", "api.credentialsSecret is required"),
])
def test_a_secure_federation_without_a_secret_refuses_to_render(
        helm_bin: Path, tmp_path: Path, setting: str, named: str) -> None:
    said = _refused(helm_bin, "cairn-federation", tmp_path, "--set", setting)
    assert named in said and "insecure: true only for development" in said


def test_an_external_nats_must_be_tls_unless_insecure(helm_bin: Path, tmp_path: Path) -> None:
    plain = ["--set", "nats.deploy=false", "--set", "nats.externalUrl=nats://nats.example:4222"]
    said = _refused(helm_bin, "cairn-federation", tmp_path, *plain)
    assert "nats://nats.example:4222 is not a tls:// URL" in said
    assert template(helm_bin, "cairn-federation", "default", tmp_path, *plain,
                    "--set", "insecure=true")


def test_the_site_refuses_to_render_without_credentials(helm_bin: Path,
                                                        tmp_path: Path) -> None:
    said = _refused(helm_bin, "cairn-site", tmp_path)
    assert "credentialsSecret is required" in said
    with_kit = ["--set", "credentialsSecret=site-a-kit"]
    said = _refused(helm_bin, "cairn-site", tmp_path, *with_kit, "--set", "leafNode.enabled=true")
    assert "leafNode.credentialsSecret is required" in said
    said = _refused(helm_bin, "cairn-site", tmp_path, *with_kit,
                    "--set", "federationUrl=nats://hub.example.org:4222")
    assert "federationUrl nats://hub.example.org:4222 is not a tls:// URL" in said
    docs = _validated(template(helm_bin, "cairn-site", "default", tmp_path))
    (parent,) = [d for d in docs if d["kind"] == "Deployment"]
    env = _env(parent["spec"]["template"]["spec"]["containers"][0])
    assert env["CAIRN_CREDS"] == "/etc/cairn/kit/site.creds"
    assert "INSECURE" not in notes(helm_bin, "cairn-site", tmp_path, *DEFAULTS["cairn-site"])


def test_an_insecure_site_takes_an_explicit_value_and_says_so(helm_bin: Path,
                                                              tmp_path: Path) -> None:
    dev = ["--set", "insecure=true", "--set", "federationUrl=nats://dev-nats:4222"]
    done = run_tool([helm_bin, "template", "rel", CHARTS / "cairn-site", *dev], tmp_path / "home")
    assert done.returncode == 0, done.stderr
    docs = _validated([d for d in yaml.safe_load_all(done.stdout) if d])
    (parent,) = [d for d in docs if d["kind"] == "Deployment"]
    env = _env(parent["spec"]["template"]["spec"]["containers"][0])
    assert "CAIRN_CREDS" not in env and env["CAIRN_NATS_URL"] == "nats://dev-nats:4222"
    said = notes(helm_bin, "cairn-site", tmp_path, *dev)
    assert said.strip().startswith("WARNING: INSECURE DEVELOPMENT SITE (insecure: true).")


def test_the_federation_chart_runs_a_nats_cluster_with_tls_routes(helm_bin: Path,
                                                                 tmp_path: Path) -> None:
    docs = _validated(template(helm_bin, "cairn-federation", "default", tmp_path,
                               "--set", "nats.cluster.replicas=3"))
    (nats,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert nats["spec"]["replicas"] == 3
    assert nats["spec"]["podManagementPolicy"] == "Parallel", "a quorum starts together"
    assert nats["spec"]["serviceName"] == "rel-nats-cluster"
    (peers,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] ==
                "rel-nats-cluster"]
    assert peers["spec"]["clusterIP"] == "None"
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and "cluster.conf" in d["data"]]
    text = config["data"]["cluster.conf"]
    assert text.startswith('include "nats.conf"'), "the provisioned TLS and callout, on each"
    for i in range(3):
        assert f"nats-route://rel-nats-{i}.rel-nats-cluster:6222" in text
    assert "verify: true" in text and "/etc/nats/route.pem" in text
    pod = nats["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"] == ["-c", "/etc/nats/cluster.conf"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    sources = volume["projected"]["sources"]
    assert {"secret": {"name": "nats-provisioned"}} in sources
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for name in ("rel-coordinator", "rel-validator", "rel-signer", "rel-authority"):
        env = _env(deployments[name]["spec"]["template"]["spec"]["containers"][0])
        assert env["CAIRN_REPLICAS"] == "3", name
    authority = deployments["rel-authority"]["spec"]["template"]["spec"]["containers"][0]
    assert authority["args"][-2:] == ["--servers", "3"]

    single = template(helm_bin, "cairn-federation", "default", tmp_path)
    assert not [d for d in single if d["kind"] == "ConfigMap" and "cluster.conf" in d["data"]]
    (one,) = [d for d in single if d["kind"] == "StatefulSet"]
    assert one["spec"]["replicas"] == 1
    (coordinator,) = [d for d in single if d["kind"] == "Deployment"
                      and d["metadata"]["name"] == "rel-coordinator"]
    assert _env(coordinator["spec"]["template"]["spec"]["containers"][0])["CAIRN_REPLICAS"] \
        == "1"
