"""Which clusters a k0rdent bundle deploys to, and which templates its upgrades start from.

The MultiClusterService selects clusters by label. By default the labels come from the
recipe's criteria: `cairn.dev/<field>: <value>` for every criteria field that is not `any`
(`nodes` is a count, not a label, and is left out), so a cluster labelled as the recipe
describes it is selected and one labelled for another accelerator, service or OS is not.
`--cluster-selector KEY=VALUE` replaces the derived labels as a whole.

k0rdent's ServiceTemplates and ServiceTemplateChains are immutable, and a service moves to
another template only along a chain's `availableUpgrades`; `--upgrade-from OLD_BUNDLE` names
the bundle a cluster runs now, so each chain starts at the template that bundle installed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from cairn.bundles.model import BundleManifest, K0rdentTarget, PlannedComponent
from cairn.bundles.text import slug
from cairn.errors import InvalidInput
from cairn.recipes.model import CRITERIA_FIELDS, Criteria

LABEL_PREFIX = "cairn.dev/"
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def template_name(component: PlannedComponent) -> str:
    """The ServiceTemplate of one component at one version (`gpu-operator-v26-7-0`)."""
    return slug(f"{component.name}-{component.version}", limit=253)


def criteria_labels(criteria: Criteria) -> dict[str, str]:
    """The cluster labels a recipe's criteria stand for (wildcards left out)."""
    return {f"{LABEL_PREFIX}{field}": str(getattr(criteria, field))
            for field in CRITERIA_FIELDS if getattr(criteria, field) != "any"}


def label_problem(key: str, value: str) -> str | None:
    """Why KEY=VALUE is not a Kubernetes label, or None when it is one."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key prefix {prefix!r} is not a DNS subdomain"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (f"label name {name!r} must be 1-63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    if value and (len(value) > 63 or not _NAME.match(value)):
        return (f"label value {value!r} must be at most 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit")
    return None


def parse_selector(items: Sequence[str]) -> dict[str, str]:
    """`--cluster-selector KEY=VALUE` (repeatable) as matchLabels.

    Raises:
        InvalidInput: an item is not KEY=VALUE, repeats a key, or is not a valid label.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise InvalidInput(f"expected KEY=VALUE, got {item!r}", field="--cluster-selector")
        if key in out:
            raise InvalidInput(f"label {key!r} is given twice", field="--cluster-selector")
        problem = label_problem(key, value)
        if problem:
            raise InvalidInput(problem, field="--cluster-selector")
        out[key] = value
    return out


def k0rdent_target(criteria: Criteria, components: Sequence[PlannedComponent],
                   selector: Mapping[str, str] | None = None,
                   previous: BundleManifest | None = None) -> K0rdentTarget:
    """The selector (given, or from the criteria) and each component's upgrade start.

    Raises:
        InvalidInput: the selector would be empty (kcm deploys it to no cluster), or a
            criteria value is not a valid label value.
    """
    labels = dict(selector) if selector else criteria_labels(criteria)
    if not labels:
        raise InvalidInput("the recipe's criteria are all wildcards, so they name no "
                           "cluster label (kcm deploys an empty selector nowhere); give "
                           "--cluster-selector KEY=VALUE", field="--cluster-selector")
    for key, value in labels.items():
        problem = label_problem(key, value)
        if problem:
            raise InvalidInput(f"{problem} (from the recipe's criteria; override with "
                               "--cluster-selector)", field="criteria")
    upgrade_from: dict[str, str] = {}
    if previous is not None:
        before = {c.name: c for c in previous.components}
        for component in components:
            old = before.get(component.name)
            if old is not None and template_name(old) != template_name(component):
                upgrade_from[component.name] = template_name(old)
    return K0rdentTarget(cluster_selector=dict(sorted(labels.items())),
                         upgrade_from=upgrade_from)
