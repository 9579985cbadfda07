"""The k0rdent deployer: every object valid against k0rdent's published CRDs, the services those
of the Helm bundle in its order, a selector that picks the recipe's clusters, upgrade chains.

The CRDs are copies from k0rdent/kcm v1.11.4 (tests/data/crds/k0rdent/README.md); jsonschema
does not evaluate their CEL rules, so the rules that concern generated objects (one chart
source per template, a chain's upgrades among its supported templates, dependencies among the
services) are checked here as kcm's webhooks check them.
"""

from __future__ import annotations

import copy
import functools
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cairn.bundles import plan_bundle, render_files
from cairn.bundles.k0rdent_target import criteria_labels, k0rdent_target
from cairn.errors import InvalidInput
from cairn.recipes import Criteria, load_catalog, resolve
from tests.unit.bundles_support import INFERENCE, RECIPES, TRAINING, cairn, objects, render
from tests.unit.test_bundles_schemas import CRDS, _closed

K0RDENT_CRDS = CRDS / "k0rdent"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def validators() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    out = {}
    paths = [*sorted(K0RDENT_CRDS.glob("*.yaml")),
             CRDS / "source.toolkit.fluxcd.io_helmrepositories.yaml"]
    for path in paths:
        crd = yaml.load(path.read_text(), Loader=_LOADER)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = _closed(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                out[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return out


def problems(doc: dict[str, Any]) -> list[str]:
    validator = validators().get((doc["apiVersion"], doc["kind"]))
    if validator is None:
        return [f"no CRD for {doc['apiVersion']} {doc['kind']}"]
    found = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
             for e in validator.iter_errors(doc)]
    if doc["kind"] == "ServiceTemplate":
        helm = doc["spec"].get("helm", {})
        if len([k for k in ("chartSpec", "chartRef", "chartSource") if k in helm]) != 1:
            found.append("spec.helm: exactly one of chartSpec, chartRef, chartSource")
    if doc["kind"] == "HelmRepository" and \
            doc["spec"]["url"].startswith("oci://") != (doc["spec"].get("type") == "oci"):
        found.append("spec.type: an oci:// URL needs type oci (source-controller's rule)")
    if doc["kind"] == "ServiceTemplateChain":  # TemplateChainSpec.IsValid
        supported = {t["name"] for t in doc["spec"].get("supportedTemplates", [])}
        for template in doc["spec"].get("supportedTemplates", []):
            for upgrade in template.get("availableUpgrades", []):
                if upgrade["name"] not in supported:
                    found.append(f"upgrade to {upgrade['name']} is not a supported template")
    return found


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def check_bundle(files: dict[str, bytes], helm: dict[str, bytes],
                 shared: dict[tuple[str, str], Any]) -> int:
    """Every object valid, and the whole consistent with the Helm bundle; objects checked.

    `shared` collects (kind, name) -> spec across bundles: recipes share a source, template
    or chain only when it is the same object (k0rdent's specs are immutable).
    """
    docs = []
    for path, data in sorted(files.items()):
        if path.endswith(".yaml") and path.split("/")[0] in ("sources", "templates", "chains",
                                                             "multiclusterservice.yaml"):
            doc = yaml.load(data, Loader=_LOADER)
            assert problems(doc) == [], path
            docs.append(doc)
    sources = _by_kind(docs, "HelmRepository")
    templates = _by_kind(docs, "ServiceTemplate")
    chains = _by_kind(docs, "ServiceTemplateChain")
    (mcs,) = _by_kind(docs, "MultiClusterService").values()
    assert all(d["metadata"].get("namespace") == "kcm-system" for d in docs if d is not mcs)
    for doc in docs:
        if doc is not mcs:
            key = (doc["kind"], doc["metadata"]["name"])
            assert shared.setdefault(key, doc["spec"]) == doc["spec"], key
    assert all(s["metadata"]["labels"]["k0rdent.mirantis.com/managed"] == "true"
               for s in sources.values())
    installs = [line.split()[1:3] for line in helm["deploy.sh"].decode().splitlines()
                if line.startswith("install_component ")]
    services = mcs["spec"]["serviceSpec"]["services"]
    assert [[s["name"], s["namespace"]] for s in services] == \
        [[n.strip("'"), ns.strip("'")] for n, ns in installs]
    seen: set[tuple[str, str]] = set()
    for service in services:
        chart = yaml.load(helm[f"{service['name']}/Chart.yaml"], Loader=_LOADER)
        dependency = chart["dependencies"][0]
        values = yaml.load(helm[f"{service['name']}/values.yaml"], Loader=_LOADER)
        template = templates[service["template"]]["spec"]["helm"]["chartSpec"]
        assert (template["chart"], template["version"]) == (dependency["name"],
                                                            dependency["version"])
        assert sources[template["sourceRef"]["name"]]["spec"]["url"] == dependency["repository"]
        assert (yaml.safe_load(service.get("values", "")) or {}) == \
            values[dependency["name"]]
        chain = chains[service["templateChain"]]["spec"]["supportedTemplates"]
        assert service["template"] in [t["name"] for t in chain]
        # kcm refuses a dependency on a service that is not in the list; here it comes first.
        for need in service.get("dependsOn", []):
            assert (need["name"], need["namespace"]) in seen, service["name"]
        seen.add((service["name"], service["namespace"]))
    return len(docs)


def test_every_kubernetes_recipe_gives_valid_consistent_k0rdent_objects() -> None:
    catalog = load_catalog(RECIPES)
    checked = 0
    shared: dict[tuple[str, str], Any] = {}
    for name in sorted(catalog.overlays):
        if not resolve(catalog, name).components:
            continue
        files = render_files(plan_bundle(catalog, name, "k0rdent"))
        helm = render_files(plan_bundle(catalog, name, "helm"))
        assert check_bundle(files, helm, shared) >= 20, name
        checked += 1
    assert checked >= 30


def test_the_validation_catches_what_k0rdent_would_reject(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    found = dict(objects(render(capsys, tmp_path / "b", INFERENCE, "k0rdent")))
    mcs = copy.deepcopy(found["multiclusterservice.yaml"])
    mcs["spec"]["serviceSpec"]["services"][0]["values"] = {"not": "text"}
    assert problems(mcs)
    mcs = copy.deepcopy(found["multiclusterservice.yaml"])
    del mcs["spec"]["serviceSpec"]["services"][0]["template"]
    assert problems(mcs)
    template = copy.deepcopy(found["templates/gpu-operator.yaml"])
    del template["spec"]["helm"]["chartSpec"]["sourceRef"]
    assert problems(template)
    template = copy.deepcopy(found["templates/gpu-operator.yaml"])
    template["spec"]["helm"]["chartRef"] = {"kind": "HelmChart", "name": "x"}
    assert problems(template)
    chain = copy.deepcopy(found["chains/gpu-operator.yaml"])
    chain["spec"]["supportedTemplates"][0]["availableUpgrades"] = [{"name": "elsewhere"}]
    assert problems(chain)
    source = copy.deepcopy(found["sources/cairn-nvidia.yaml"])
    source["spec"]["type"] = "git"
    assert problems(source)


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        holds = {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                 "Exists": key in labels, "DoesNotExist": key not in labels}[operator]
        if not holds:
            return False
    return True


def _selector(root: Path) -> dict[str, Any]:
    mcs = yaml.safe_load((root / "multiclusterservice.yaml").read_text())
    return dict(mcs["spec"]["clusterSelector"])


def test_the_selector_picks_the_clusters_labelled_with_the_recipes_criteria(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    catalog = load_catalog(RECIPES)
    selector = _selector(render(capsys, tmp_path / "b", TRAINING, "k0rdent"))
    criteria = resolve(catalog, TRAINING).criteria
    labelled = {**criteria_labels(criteria), "region": "us-east-1", "team": "ml"}
    assert labelled["cairn.dev/accelerator"] == "h100"
    assert matches(selector, labelled)
    for other in ({"cairn.dev/accelerator": "gb200"}, {"cairn.dev/service": "gke"},
                  {"cairn.dev/intent": "inference"}):
        assert not matches(selector, {**labelled, **other}), other
    assert not matches(selector, {k: v for k, v in labelled.items()
                                  if k != "cairn.dev/os"})
    # The inference recipe's clusters are not the training recipe's.
    inference = criteria_labels(resolve(catalog, INFERENCE).criteria)
    assert not matches(selector, inference)
    assert matches(_selector(render(capsys, tmp_path / "i", INFERENCE, "k0rdent")), inference)


def test_the_selector_can_be_overridden_and_bad_labels_are_refused(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = render(capsys, tmp_path / "b", TRAINING, "k0rdent", "--cluster-selector",
                  "fleet=gpu-a", "--cluster-selector", "example.com/tier=prod")
    selector = _selector(root)
    assert selector == {"matchLabels": {"example.com/tier": "prod", "fleet": "gpu-a"}}
    assert matches(selector, {"fleet": "gpu-a", "example.com/tier": "prod",
                              "cairn.dev/accelerator": "a100"})
    assert "kubectl label clusterdeployment -n NAMESPACE CLUSTER example.com/tier=prod " \
           "fleet=gpu-a" in (root / "README.md").read_text()
    for bad, message in (("fleet", "expected KEY=VALUE"), ("-x=1", "label name '-x'"),
                         ("a=b c", "label value 'b c'"), ("Bad_/x=1", "prefix 'Bad_'")):
        code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--deployer", "k0rdent",
                             "--out", str(tmp_path / "o"), "--cluster-selector", bad)
        assert code == 3 and message in err and "Traceback" not in err, (bad, err)
    code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--deployer", "helm",
                         "--out", str(tmp_path / "o"), "--cluster-selector", "a=b")
    assert code == 2 and "--deployer k0rdent" in err
    assert not (tmp_path / "o").exists()


def _older(root: Path, component: str, version: str) -> None:
    """Make `root` a bundle of an older version of one component (as last month's was)."""
    manifest = yaml.safe_load((root / "bundle.yaml").read_text())
    for entry in manifest["components"]:
        if entry["name"] == component:
            entry["version"] = version
    (root / "bundle.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def test_upgrade_from_makes_chains_that_lead_from_the_running_templates(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    old = render(capsys, tmp_path / "old", TRAINING, "k0rdent")
    _older(old, "gpu-operator", "v25.10.1")
    new = render(capsys, tmp_path / "new", TRAINING, "k0rdent", "--upgrade-from", str(old))
    chain = yaml.safe_load((new / "chains" / "gpu-operator.yaml").read_text())
    assert chain["metadata"]["name"] == "gpu-operator-v25-10-1-to-v26-7-0"
    assert chain["spec"]["supportedTemplates"] == [
        {"name": "gpu-operator-v25-10-1", "availableUpgrades": [{"name": "gpu-operator-v26-7-0"}]},
        {"name": "gpu-operator-v26-7-0"}]
    assert problems(chain) == []
    services = {s["name"]: s for s in
                yaml.safe_load((new / "multiclusterservice.yaml").read_text())
                ["spec"]["serviceSpec"]["services"]}
    assert services["gpu-operator"]["templateChain"] == "gpu-operator-v25-10-1-to-v26-7-0"
    assert services["nfd"]["templateChain"] == services["nfd"]["template"]  # unchanged
    # The diff says an upgrade without a chain path would not move the service.
    plain = render(capsys, tmp_path / "plain", TRAINING, "k0rdent")
    code, out, _ = cairn(capsys, "bundle", "diff", str(old), str(plain), "-o", "json")
    risks = {(r["component"], r["risk"]) for r in yaml.safe_load(out)["risks"]}
    assert code == 0 and ("gpu-operator", "no-upgrade-path") in risks
    code, out, _ = cairn(capsys, "bundle", "diff", str(old), str(new), "-o", "json")
    assert ("gpu-operator", "no-upgrade-path") not in {
        (r["component"], r["risk"]) for r in yaml.safe_load(out)["risks"]}
    # Not a bundle, or a malformed one: one line, its exit code, nothing written.
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bundle.yaml").write_text("format: x\n")
    for given, code_expected, message in ((tmp_path / "none", 4, "no such bundle directory"),
                                          (tmp_path, 4, "not a Cairn bundle"),
                                          (tmp_path / "bad", 3, "bundle.yaml:1: recipe")):
        code, _, err = cairn(capsys, "bundle", "--recipe", TRAINING, "--deployer", "k0rdent",
                             "--upgrade-from", str(given), "--out", str(tmp_path / "o"))
        assert code == code_expected and message in err and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()


def test_diff_puts_a_changed_selector_first(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    old = render(capsys, tmp_path / "old", TRAINING, "k0rdent")
    new = render(capsys, tmp_path / "new", TRAINING, "k0rdent", "--cluster-selector",
                 "fleet=gpu")
    code, out, _ = cairn(capsys, "bundle", "diff", str(old), str(new))
    assert code == 0
    risks = out.split("### Upgrade risks", 1)[1]
    assert "| (cluster selector) | selector-changed |" in risks
    assert "-> fleet=gpu: clusters the new selector does not match lose every service" in risks


def test_explain_and_verify_work_on_k0rdent_and_pulumi_bundles(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for deployer in ("k0rdent", "pulumi"):
        root = render(capsys, tmp_path / deployer, TRAINING, deployer, "--set",
                      "gpu-operator.driver.version=580.105.08")
        code, out, _ = cairn(capsys, "bundle", "explain", str(root), "--component",
                             "gpu-operator", "-o", "json")
        rows = {r["path"]: r for r in yaml.safe_load(out)["values"]}
        assert code == 0 and rows["values.driver.version"]["layer"] == "set"
        assert cairn(capsys, "bundle", "verify", str(root))[0] == 0
        edited = root / ("multiclusterservice.yaml" if deployer == "k0rdent" else "recipe.json")
        edited.write_text(edited.read_text().replace("580.105.08", "570.1"))
        code, out, _ = cairn(capsys, "bundle", "verify", str(root))
        assert code == 9 and f"changed: {edited.name}" in out
        shutil.rmtree(root)


def test_a_recipe_of_wildcards_needs_a_selector_given() -> None:
    """An empty selector deploys nowhere in kcm: refused, unless labels are given."""
    with pytest.raises(InvalidInput, match="--cluster-selector KEY=VALUE"):
        k0rdent_target(Criteria(), [])
    assert k0rdent_target(Criteria(), [], {"fleet": "a"}).cluster_selector == {"fleet": "a"}
    with pytest.raises(InvalidInput, match="from the recipe's criteria"):
        k0rdent_target(Criteria(accelerator="h100 sxm"), [])
