"""Matching (wildcards one way, order by specificity) and resolution (bases, mixins, merges)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.errors import InvalidInput, NotFound
from cairn.recipes import Catalog, Criteria, load_checks, load_criteria, match, query_value, resolve
from cairn.recipes.catalog import RecipeEntry, parse_recipe
from cairn.recipes.matching import specificity

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _entry(text: str, kind: str = "overlay") -> RecipeEntry:
    return parse_recipe(text, "mixin" if kind == "mixin" else "overlay", "<test>")


def build(*texts: str, mixins: tuple[str, ...] = ()) -> Catalog:
    entries = [_entry(t) for t in texts] + [_entry(t, "mixin") for t in mixins]
    return Catalog.build(
        load_criteria(RECIPES / "criteria.yaml"), load_checks(RECIPES / "checks.yaml"), entries
    )


ROOT = """
name: root
criteria: {scheduler: kubernetes}
constraints:
  - {name: K8s.server.version, value: ">= 1.25", source: a}
components:
  - name: gpu-operator
    version: v25.10.1
    values: {driver: {enabled: true, version: "580"}, cdi: {enabled: false}}
"""
EKS = """
name: eks
base: root
criteria: {service: eks}
constraints:
  - {name: K8s.server.version, value: ">= 1.32"}
components:
  - name: gpu-operator
    values: {cdi: {enabled: true}}
"""
H100 = """
name: h100-eks
base: eks
mixins: [ubuntu]
criteria: {service: eks, accelerator: h100}
validation:
  performance:
    checks: [{name: nccl-all-reduce-bw, with: {transport: net}}]
    constraints: [{name: nccl-all-reduce-bw, value: ">= 300"}]
"""
ANY_H100 = """
name: h100-anywhere
criteria: {accelerator: h100, scheduler: kubernetes}
"""
UBUNTU = """
name: ubuntu
constraints:
  - {name: OS.release.ID, value: ubuntu}
"""


@pytest.fixture
def catalog() -> Catalog:
    return build(ROOT, EKS, H100, ANY_H100, mixins=(UBUNTU,))


def names(catalog: Catalog, **query: object) -> list[str]:
    return [e.name for e in match(catalog, Criteria(**query))]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"service": "eks", "accelerator": "h100"}, ["root", "eks", "h100-anywhere", "h100-eks"]),
        ({"service": "eks"}, ["root", "eks"]),  # query any: only recipes that are any there
        ({"service": "eks", "accelerator": "any"}, ["root", "eks"]),
        (
            {"service": "self-managed", "accelerator": "h100", "scheduler": "k8s"},
            ["root", "h100-anywhere"],
        ),
        ({"service": "gke", "accelerator": "h100"}, ["root", "h100-anywhere"]),
        ({"scheduler": "slurm"}, []),
        ({}, []),
    ],
)
def test_wildcards_go_one_way(
    catalog: Catalog, query: dict[str, object], expected: list[str]
) -> None:
    assert names(catalog, **query) == expected


def test_unknown_query_value_lists_the_allowed_ones(catalog: Catalog) -> None:
    with pytest.raises(InvalidInput) as exc:
        names(catalog, accelerator="h900")
    assert exc.value.field == "query.accelerator"
    assert "h100" in str(exc.value) and "allowed" in str(exc.value)


def test_implication_contradiction_is_an_error(catalog: Catalog) -> None:
    with pytest.raises(InvalidInput, match="implies scheduler=kubernetes"):
        names(catalog, service="eks", scheduler="slurm")


def test_resolve_merges_base_chain_mixins_and_overrides(catalog: Catalog) -> None:
    recipe = resolve(catalog, "h100-eks")
    assert recipe.applied == ["root", "eks", "ubuntu", "h100-eks"]
    assert [(c.name, c.value) for c in recipe.constraints] == [
        ("K8s.server.version", ">= 1.32"),
        ("OS.release.ID", "ubuntu"),
    ]
    # field-level override keeps the earlier source; values deep-merge
    assert recipe.constraints[0].source == "a"
    operator = recipe.component("gpu-operator")
    assert operator is not None and operator.version == "v25.10.1"
    assert operator.values == {
        "driver": {"enabled": True, "version": "580"},
        "cdi": {"enabled": True},
    }
    check = recipe.validation["performance"].checks[0]
    assert check.with_ == {"transport": "net"} and check.timeout == "30m"


def test_provenance_names_the_file_that_set_each_value() -> None:
    entries = [
        parse_recipe(t, "overlay", f"overlays/{n}.yaml") for n, t in (("root", ROOT), ("eks", EKS))
    ]
    catalog = Catalog.build(
        load_criteria(RECIPES / "criteria.yaml"), load_checks(RECIPES / "checks.yaml"), entries
    )
    where = {".".join(p.path): p.file for p in resolve(catalog, "eks").provenance}
    assert where["components.gpu-operator.version"] == "overlays/root.yaml"
    assert where["components.gpu-operator.values.cdi.enabled"] == "overlays/eks.yaml"
    assert where["components.gpu-operator.values.driver.version"] == "overlays/root.yaml"
    assert where["constraints.K8s.server.version.value"] == "overlays/eks.yaml"
    assert where["constraints.K8s.server.version.source"] == "overlays/root.yaml"


def test_resolve_by_query_uses_overlays_in_order(catalog: Catalog) -> None:
    recipe = resolve(catalog, Criteria(service="eks", accelerator="h100"))
    assert recipe.name == "h100-eks"
    assert recipe.applied == ["root", "eks", "h100-anywhere", "ubuntu", "h100-eks"]
    with pytest.raises(NotFound):
        resolve(catalog, Criteria(scheduler="docker"))


def test_query_value_by_dotted_path(catalog: Catalog) -> None:
    recipe = resolve(catalog, "h100-eks")
    assert query_value(recipe, "components.gpu-operator.version") == "v25.10.1"
    assert query_value(recipe, "constraints.K8s.server.version.value") == ">= 1.32"
    assert query_value(recipe, "validation.performance.checks.nccl-all-reduce-bw.with") == {
        "transport": "net"
    }
    with pytest.raises(NotFound):
        query_value(recipe, "components.nope.version")


def test_base_cycle_is_rejected_naming_the_cycle() -> None:
    a = "name: a\nbase: b\ncriteria: {service: eks}\n"
    b = "name: b\nbase: a\ncriteria: {service: aks}\n"
    with pytest.raises(InvalidInput, match=r"base cycle: a -> b -> a"):
        build(a, b)


def test_unknown_name_is_not_found(catalog: Catalog) -> None:
    with pytest.raises(NotFound):
        resolve(catalog, "nope")


_CRITERIA = st.fixed_dictionaries(
    {
        "service": st.sampled_from(["any", "eks", "aks", "gke"]),
        "accelerator": st.sampled_from(["any", "h100", "h200", "gb200"]),
        "os": st.sampled_from(["any", "ubuntu", "cos"]),
        "intent": st.sampled_from(["any", "training", "inference"]),
    }
)


@settings(max_examples=50, deadline=None)
@given(st.lists(_CRITERIA, min_size=1, max_size=12), _CRITERIA, st.randoms())
def test_matching_is_deterministic_and_independent_of_file_order(
    recipes: list[dict[str, str]], query: dict[str, str], rnd: object
) -> None:
    texts = [f"name: r{i}\ncriteria: {crit}\n".replace("'", "") for i, crit in enumerate(recipes)]
    catalog = build(*texts)
    first = names(catalog, **query)
    shuffled = list(texts)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert names(build(*shuffled), **query) == first
    # every match really matches, in non-decreasing specificity
    for name in first:
        crit = recipes[int(name[1:])]
        assert all(v in ("any", query[k]) for k, v in crit.items())
    # Specificity is the catalog's own reading of the criteria: normalised, implications
    # included (an `h100` overlay implies more than it names), not a count of the raw text.
    spec = [specificity(catalog.overlays[n].spec.criteria) for n in first]
    assert spec == sorted(spec)
