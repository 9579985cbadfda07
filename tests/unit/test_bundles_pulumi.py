"""The pulumi deployer's program, run with the Pulumi SDK's own mocks (no engine, no cloud).

For every Kubernetes recipe of the catalog, the generated `__main__.py` registers exactly the
Helm releases of the Helm bundle of the same recipe (charts, versions, repositories,
namespaces, values, read from that bundle's files), each depending on the release before it
in deploy.sh's order, under one `cairn:recipe:Recipe` component, and exports the recipe name
and digest. One process runs them all: each run gets a fresh mock monitor and root stack.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import runpy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from cairn.bundles import plan_bundle, render_files, write_bundle
from cairn.bundles.fingerprint import recipe_digest
from cairn.recipes import load_catalog, resolve
from tests.unit.bundles_support import INFERENCE, RECIPES

RELEASE = "kubernetes:helm.sh/v3:Release"
COMPONENT = "cairn:recipe:Recipe"
PROVIDER = "pulumi:providers:kubernetes"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Echo(pulumi.runtime.Mocks):  # type: ignore[misc]
    """Every resource's state is its inputs; the program calls no functions."""

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: Any) -> dict[str, Any]:
        return {}


@dataclass
class Registered:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    provider: str
    inputs: dict[str, Any]


class _Recording(mocks.MockMonitor):  # type: ignore[misc]
    """The SDK's mock monitor, keeping each registration's parent and dependencies."""

    def __init__(self, echo: _Echo) -> None:
        super().__init__(echo)
        self.registered: list[Registered] = []

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the monitor's RPC name
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            state = self.resources[response.urn].state
            self.registered.append(Registered(
                type=request.type, name=request.name, urn=response.urn, parent=request.parent,
                dependencies=list(request.dependencies), provider=request.provider,
                inputs=state))
        return response


_LOOP: asyncio.AbstractEventLoop | None = None


def run_program(bundle: Path, config: dict[str, str] | None = None,
                ) -> tuple[list[Registered], dict[str, Any]]:
    """Run the bundle's `__main__.py` under mocks: what it registered, and its outputs."""
    # The SDK runs on the thread's current loop, which an async test before this one may have
    # closed and unset (pytest-asyncio): a loop of these tests' own.
    global _LOOP
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    asyncio.set_event_loop(_LOOP)
    settings.ROOT.set(None)
    echo = _Echo()
    monitor = _Recording(echo)
    mocks.set_mocks(echo, project="cairn-test", stack="test", preview=False, monitor=monitor)
    for key, value in (config or {}).items():
        pulumi.runtime.set_config(f"cairn-test:{key}", value)
    sys.path.insert(0, str(bundle))
    sys.modules.pop("cairn_recipe", None)
    try:
        _sync_await(run_pulumi_func(lambda: runpy.run_path(str(bundle / "__main__.py"))))
    finally:
        sys.path.remove(str(bundle))
        sys.modules.pop("cairn_recipe", None)
        for key in config or {}:
            pulumi.runtime.set_config(f"cairn-test:{key}", "")
    stack = settings.get_root_resource()
    outputs = {k: _sync_await(pulumi.Output.from_input(v).future())
               for k, v in stack.outputs.items()}
    return monitor.registered, outputs


def helm_bundle_releases(files: dict[str, bytes]) -> list[dict[str, Any]]:
    """The releases the Helm bundle installs, in deploy.sh's order, from its own files."""
    out = []
    for line in files["deploy.sh"].decode().splitlines():
        if not line.startswith("install_component "):
            continue
        name, namespace = (part.strip("'") for part in line.split()[1:3])
        chart = yaml.load(files[f"{name}/Chart.yaml"], Loader=_LOADER)["dependencies"][0]
        values = yaml.load(files[f"{name}/values.yaml"], Loader=_LOADER)[chart["name"]]
        out.append({"name": name, "namespace": namespace, "chart": chart["name"],
                    "repository": chart["repository"], "version": chart["version"],
                    "values": values})
    return out


def _as_registered(release: dict[str, Any]) -> dict[str, Any]:
    """What the Release resource for one Helm-bundle release must receive."""
    oci = release["repository"].startswith("oci://")
    return {"name": release["name"], "namespace": release["namespace"],
            "chart": f"{release['repository']}/{release['chart']}" if oci else release["chart"],
            "repository": None if oci else release["repository"],
            "version": release["version"], "values": release["values"],
            "createNamespace": True}


def _values(inputs: dict[str, Any]) -> Any:
    """The values Helm reads: the one values file (a null survives; `values=` drops it)."""
    assert "values" not in inputs
    (asset,) = inputs["valueYamlFiles"]
    assert isinstance(asset, pulumi.StringAsset)
    return yaml.safe_load(asset.text)


def _registered_release(resource: Registered) -> dict[str, Any]:
    inputs = resource.inputs
    return {"name": inputs["name"], "namespace": inputs["namespace"], "chart": inputs["chart"],
            "repository": (inputs.get("repositoryOpts") or {}).get("repo"),
            "version": inputs["version"], "values": _values(inputs),
            "createNamespace": inputs.get("createNamespace")}


def _check(catalog: Any, recipe: str, root: Path) -> None:
    helm = render_files(plan_bundle(catalog, recipe, "helm"))
    plan = plan_bundle(catalog, recipe, "pulumi")
    write_bundle(render_files(plan), root)
    registered, outputs = run_program(root)
    components = [r for r in registered if r.type == COMPONENT]
    assert [c.name for c in components] == ["recipe"], recipe
    releases = [r for r in registered if r.type == RELEASE]
    expected = helm_bundle_releases(helm)
    assert [_registered_release(r) for r in releases] == \
        [_as_registered(e) for e in expected], recipe
    # One chain: each release depends on exactly the one before it, none on anything else.
    assert [r.dependencies for r in releases] == \
        [[], *([previous.urn] for previous in releases[:-1])], recipe
    assert all(r.parent == components[0].urn for r in releases), recipe
    assert outputs["recipe"] == recipe
    assert outputs["digest"] == recipe_digest(plan.manifest)
    assert outputs["releases"] == {e["name"]: e["namespace"] for e in expected}


def test_every_kubernetes_recipe_registers_the_helm_bundles_releases_in_order(
        tmp_path: Path) -> None:
    catalog = load_catalog(RECIPES)
    checked = 0
    for name in sorted(catalog.overlays):
        if resolve(catalog, name).components:
            _check(catalog, name, tmp_path / name)
            checked += 1
    assert checked >= 30


def test_the_digest_is_the_documented_sha256_the_same_for_every_deployer(
        tmp_path: Path) -> None:
    """sha256 of the canonical JSON of {recipe, components} as bundle.yaml lists them."""
    catalog = load_catalog(RECIPES)
    digests = set()
    for deployer in ("helm", "pulumi", "k0rdent"):
        root = tmp_path / deployer
        write_bundle(render_files(plan_bundle(catalog, INFERENCE, deployer)), root)
        manifest = yaml.safe_load((root / "bundle.yaml").read_text())
        canonical = json.dumps({"components": manifest["components"],
                                "recipe": manifest["recipe"]},
                               sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digests.add("sha256:" + hashlib.sha256(canonical.encode()).hexdigest())
    (digest,) = digests
    _, outputs = run_program(tmp_path / "pulumi")
    assert outputs["digest"] == digest
    mcs = yaml.safe_load((tmp_path / "k0rdent" / "multiclusterservice.yaml").read_text())
    assert mcs["metadata"]["annotations"]["cairn.dev/recipe-digest"] == digest
    changed = plan_bundle(catalog, INFERENCE, "pulumi", sets=["gpu-operator.x=1"])
    assert recipe_digest(changed.manifest) != digest


def test_the_kubeconfig_config_key_gives_every_release_its_provider(tmp_path: Path) -> None:
    catalog = load_catalog(RECIPES)
    write_bundle(render_files(plan_bundle(catalog, INFERENCE, "pulumi")), tmp_path / "b")
    registered, _ = run_program(tmp_path / "b", {"kubeconfig": "/etc/cluster-a.yaml",
                                                 "context": "cluster-a"})
    providers = [r for r in registered if r.type == PROVIDER]
    assert [(p.inputs["kubeconfig"], p.inputs["context"]) for p in providers] == \
        [("/etc/cluster-a.yaml", "cluster-a")]
    releases = [r for r in registered if r.type == RELEASE]
    assert releases and all(r.provider.startswith(providers[0].urn) for r in releases)
    # Without the key, no provider: the ambient kubeconfig, as kubectl finds it.
    registered, _ = run_program(tmp_path / "b")
    assert not [r for r in registered if r.type == PROVIDER]


def test_the_component_imports_into_another_program(tmp_path: Path) -> None:
    """Two recipes in one program: resource names do not collide, releases keep theirs."""
    catalog = load_catalog(RECIPES)
    write_bundle(render_files(plan_bundle(catalog, INFERENCE, "pulumi")), tmp_path / "b")
    program = tmp_path / "b" / "__main__.py"
    program.write_text(
        "import json, pathlib\nimport pulumi\nfrom cairn_recipe import Recipe\n"
        "spec = json.loads((pathlib.Path(__file__).parent / 'recipe.json').read_text())\n"
        "a, b = Recipe('site-a', spec), Recipe('site-b', spec)\n"
        "pulumi.export('digests', [a.digest, b.digest])\n")
    registered, outputs = run_program(tmp_path / "b")
    releases = [r for r in registered if r.type == RELEASE]
    assert len({r.name for r in releases}) == len(releases) == 32
    assert {r.inputs["name"] for r in releases if r.name.startswith("site-a-")} == \
        {r.inputs["name"] for r in releases if r.name.startswith("site-b-")}
    assert outputs["digests"][0] == outputs["digests"][1]
