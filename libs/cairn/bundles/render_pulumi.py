"""The pulumi deployer: a Pulumi project (Python) that installs the recipe as Helm releases.

`Pulumi.yaml` declares the project and its config keys (`kubeconfig`, `context`);
`recipe.json` is the data (the components in deployment order, with the exact charts,
versions, namespaces and values of the Helm bundle); `cairn_recipe.py` is the
`cairn:recipe:Recipe` component resource, importable into an existing program; `__main__.py`
is the program `pulumi up` runs: a Kubernetes provider from the config, the component, and
the recipe's name and digest as stack outputs.

Each component is a `kubernetes.helm.v3.Release`, not a v4 `Chart`: a Release is a real Helm
release (Helm's own install and upgrade, hooks, `helm list`, the release name and namespace
the helm deployer uses), so a cluster looks the same whichever of the two installed it; v4
Chart renders the templates into separate Pulumi resources and keeps no Helm release. Each
release `depends_on` the one before it in the deployment order, so Pulumi installs them one
after the other, as `deploy.sh` does, every recipe dependency included.
"""

from __future__ import annotations

import json

from cairn.bundles.model import BundleManifest
from cairn.bundles.text import GENERATED, dump_yaml, slug

COMPONENT_TYPE = "cairn:recipe:Recipe"
REQUIREMENTS = "pulumi>=3.100,<4\npulumi-kubernetes>=4.18,<5\n"

COMPONENT_MODULE = f'''"""`{COMPONENT_TYPE}`: a Cairn recipe as one Pulumi component resource.

{GENERATED}

Each component of the recipe is a Helm release (`kubernetes.helm.v3.Release`), installed
after the one before it in the recipe's deployment order. Import it into any program:

    import json, pathlib
    import pulumi
    from cairn_recipe import Recipe

    spec = json.loads(pathlib.Path("recipe.json").read_text())
    gpu = Recipe("gpu", spec, opts=pulumi.ResourceOptions(providers=[my_k8s_provider]))
    pulumi.export("gpu-digest", gpu.digest)
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

TYPE = "{COMPONENT_TYPE}"
HELM_TIMEOUT_S = 600


def release_args(component: dict[str, Any]) -> k8s.helm.v3.ReleaseArgs:
    """The Helm release of one component: the pinned chart, its namespace and values.

    The values go to Helm as a values file (JSON is YAML), not as `values=`: Pulumi drops
    null entries from resource inputs, and a null is how a recipe removes a chart default.
    """
    repository = component["repository"]
    if repository.startswith("oci://"):
        chart, opts = f"{{repository.rstrip('/')}}/{{component['chart']}}", None
    else:
        chart = component["chart"]
        opts = k8s.helm.v3.RepositoryOptsArgs(repo=repository)
    return k8s.helm.v3.ReleaseArgs(
        name=component["name"],
        chart=chart,
        version=component["version"],
        repository_opts=opts,
        namespace=component["namespace"],
        create_namespace=True,
        value_yaml_files=[pulumi.StringAsset(json.dumps(component["values"], sort_keys=True))],
        timeout=HELM_TIMEOUT_S,
    )


class Recipe(pulumi.ComponentResource):
    """Every component of one recipe, as Helm releases in deployment order.

    `spec` is the bundle's recipe.json. Resource names are `<name>-<component>`, so one
    program can hold several recipes; Helm release names are the component names.
    """

    releases: dict[str, k8s.helm.v3.Release]

    def __init__(self, name: str, spec: dict[str, Any],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE, name, None, opts)
        self.releases = {{}}
        previous: list[pulumi.Resource] = []
        for component in spec["components"]:
            release = k8s.helm.v3.Release(
                f"{{name}}-{{component['name']}}", release_args(component),
                opts=pulumi.ResourceOptions(parent=self, depends_on=previous))
            self.releases[component["name"]] = release
            previous = [release]
        self.recipe = pulumi.Output.from_input(spec["recipe"])
        self.digest = pulumi.Output.from_input(spec["digest"])
        self.register_outputs({{
            "recipe": self.recipe,
            "digest": self.digest,
            "releases": [c["name"] for c in spec["components"]],
        }})
'''

MAIN_MODULE = f'''"""The Pulumi program of this bundle: `pulumi up` installs the recipe.

{GENERATED}

Config (`pulumi config set KEY VALUE`): `kubeconfig`, a kubeconfig file's path or contents
(default: the ambient kubeconfig, as kubectl finds it), and `context`, a context in it.
"""

import json
import pathlib

import pulumi
import pulumi_kubernetes as k8s
from cairn_recipe import Recipe

spec = json.loads((pathlib.Path(__file__).parent / "recipe.json").read_text())
config = pulumi.Config()
kubeconfig, context = config.get("kubeconfig"), config.get("context")
opts = None
if kubeconfig or context:
    cluster = k8s.Provider("cluster", kubeconfig=kubeconfig, context=context)
    opts = pulumi.ResourceOptions(providers=[cluster])
recipe = Recipe("recipe", spec, opts=opts)
pulumi.export("recipe", recipe.recipe)
pulumi.export("digest", recipe.digest)
pulumi.export("releases", {{c["name"]: c["namespace"] for c in spec["components"]}})
'''


def project_name(manifest: BundleManifest) -> str:
    return slug(f"cairn-{manifest.recipe}")


def pulumi_yaml(manifest: BundleManifest) -> str:
    project = {
        "name": project_name(manifest),
        "description": f"Recipe {manifest.recipe} as Helm releases (cairn bundle).",
        "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": "venv"}},
        "config": {
            "kubeconfig": {"type": "string", "default": "",
                           "description": "Kubeconfig path or contents (default: ambient)"},
            "context": {"type": "string", "default": "",
                        "description": "Kubeconfig context (default: its current one)"},
        },
    }
    return dump_yaml(project, GENERATED)


def recipe_json(manifest: BundleManifest, digest: str) -> str:
    components = [{"name": c.name, "chart": c.chart_name, "repository": c.repository,
                   "version": c.version, "namespace": c.namespace, "wave": c.wave,
                   "dependencies": c.dependencies, "values": c.values}
                  for c in manifest.components]
    data = {"recipe": manifest.recipe, "digest": digest, "components": components}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render(manifest: BundleManifest, digest: str) -> dict[str, str]:
    return {
        "Pulumi.yaml": pulumi_yaml(manifest),
        "requirements.txt": REQUIREMENTS,
        "recipe.json": recipe_json(manifest, digest),
        "cairn_recipe.py": COMPONENT_MODULE,
        "__main__.py": MAIN_MODULE,
    }


def commands(manifest: BundleManifest) -> list[str]:
    """The README's deploy section."""
    return [
        "## Deploy", "",
        "Needs the `pulumi` CLI (3.x) and Python 3.10+. The program installs each component as",
        "a Helm release (`kubernetes.helm.v3.Release`), each after the one before it above.", "",
        "```sh",
        "pulumi stack init dev",
        "pulumi config set kubeconfig ~/.kube/config   # optional; default: the ambient one",
        "pulumi config set context my-cluster          # optional",
        "pulumi up                                     # installs or upgrades, in order",
        "pulumi stack output digest                    # the recipe digest of this bundle",
        "pulumi destroy                                # removes, in reverse order",
        "```", "",
        f"To use the recipe inside an existing program, copy `cairn_recipe.py` and "
        f"`recipe.json` and create `Recipe(name, spec)` (type `{COMPONENT_TYPE}`).",
    ]
