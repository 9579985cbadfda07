"""Every object a bundle holds is valid: Argo CD and Flux kinds against their upstream CRD
schemas (tests/data/crds, checked with jsonschema, unknown fields refused as the API server's
pruning would drop them), every other object with kubernetes-validate.

kustomize's own `kustomization.yaml` (kustomize.config.k8s.io) is a build input, not an
object sent to a cluster; the tools test runs `kubectl kustomize` on it.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cairn.bundles import GitTarget, plan_bundle, render_files
from cairn.recipes import load_catalog, resolve
from tests.unit.bundles_support import (
    INFERENCE,
    RECIPES,
    REPO_URL,
    TRAINING,
    objects,
    render,
)

CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"
KUBERNETES_VERSION = "1.32"
NOT_CLUSTER_OBJECTS = {("kustomize.config.k8s.io/v1beta1", "Kustomization")}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a tenth of the time


def _closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the CRD does not keep them."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@functools.cache
def crd_validators() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served"):
                continue
            schema = _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            out[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return out


def problems(doc: dict[str, Any]) -> list[str]:
    """What is wrong with one object; empty when it is valid."""
    key = (doc["apiVersion"], doc["kind"])
    validator = crd_validators().get(key)
    if validator is not None:
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [str(exc)]
    return []


def test_the_crd_copies_cover_every_kind_bundles_generate() -> None:
    assert set(crd_validators()) == {
        ("argoproj.io/v1alpha1", "Application"),
        ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),
        ("source.toolkit.fluxcd.io/v1", "HelmRepository"),
        ("source.toolkit.fluxcd.io/v1", "OCIRepository"),
        ("kustomize.toolkit.fluxcd.io/v1", "Kustomization"),
    }


@pytest.mark.parametrize("recipe", [TRAINING, INFERENCE])
@pytest.mark.parametrize("deployer", ["argocd", "flux"])
def test_every_generated_object_is_valid(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         recipe: str, deployer: str) -> None:
    bundle = render(capsys, tmp_path / "b", recipe, deployer)
    found = objects(bundle)
    kinds = {(d["apiVersion"], d["kind"]) for _, d in found}
    if deployer == "argocd":
        # One Application per component plus the app-of-apps; OCI registries' Secrets.
        assert ("v1", "Secret") in kinds
        assert sum(d["kind"] == "Application" for _, d in found) == \
            len(list((bundle / "apps").glob("*.yaml"))) - sum(
                d["kind"] == "Secret" for _, d in found) + 1
    else:
        assert {k for _, k in kinds} >= {"HelmRepository", "OCIRepository", "HelmRelease",
                                          "Kustomization"}
    checked = 0
    for file, doc in found:
        if (doc["apiVersion"], doc["kind"]) in NOT_CLUSTER_OBJECTS:
            continue
        assert problems(doc) == [], file
        checked += 1
    assert checked >= 16


def test_the_validation_catches_what_a_controller_would_reject(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The checks above are not vacuous: broken objects of each kind fail them."""
    flux = dict(objects(render(capsys, tmp_path / "f", INFERENCE, "flux")))
    argo = dict(objects(render(capsys, tmp_path / "a", INFERENCE, "argocd")))
    release = copy.deepcopy(flux["releases/gpu-operator.yaml"])
    del release["spec"]["chart"]["spec"]["sourceRef"]
    assert problems(release)
    typo = copy.deepcopy(flux["releases/gpu-operator.yaml"])
    typo["spec"]["dependOn"] = typo["spec"].pop("dependsOn")
    assert problems(typo)
    oci = copy.deepcopy(flux["sources/nvsentinel-oci.yaml"])
    oci["spec"]["url"] = "https://ghcr.io/nvidia/nvsentinel"
    assert problems(oci)
    app = copy.deepcopy(argo["apps/gpu-operator.yaml"])
    app["spec"]["source"]["helm"]["valuesObject"] = "not a mapping"
    del app["spec"]["destination"]
    app["spec"]["syncPolicy"]["syncOptions"] = "CreateNamespace=true"
    assert len(problems(app)) >= 1
    secret = copy.deepcopy(argo["apps/repo-ghcr-io-nvidia.yaml"])
    secret["stringData"]["enableOCI"] = True
    assert problems(secret)


def test_every_kubernetes_recipe_in_the_catalog_renders_valid_objects() -> None:
    catalog = load_catalog(RECIPES)
    rendered = 0
    for name in catalog.overlays:
        if not resolve(catalog, name).components:
            continue
        for deployer in ("argocd", "flux"):
            plan = plan_bundle(catalog, name, deployer)
            files = render_files(plan, GitTarget(repo_url=REPO_URL))
            for path, data in sorted(files.items()):
                if not path.endswith(".yaml"):
                    continue
                doc = yaml.load(data, Loader=_LOADER)
                if "apiVersion" in doc and (doc["apiVersion"], doc["kind"]) not in \
                        NOT_CLUSTER_OBJECTS:
                    assert problems(doc) == [], f"{name} {deployer} {path}"
        rendered += 1
    assert rendered >= 30
