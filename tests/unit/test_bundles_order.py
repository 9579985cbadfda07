"""Deployment order: laws that hold for any dependency graph."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.bundles.order import deploy_order
from cairn.errors import InvalidInput

NAMES = [f"c{i}" for i in range(12)]


@st.composite
def dags(draw: st.DrawFn) -> dict[str, list[str]]:
    """Random acyclic graphs: a component may depend only on ones earlier in a shuffle, plus
    dependencies on components that are not in the bundle."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=12, unique=True))
    graph: dict[str, list[str]] = {}
    for index, name in enumerate(names):
        earlier = names[:index]
        deps = draw(st.lists(st.sampled_from(earlier), unique=True)) if earlier else []
        graph[name] = [*deps, *draw(st.lists(st.just("not-in-bundle"), max_size=1))]
    return graph


@settings(max_examples=200, deadline=None)
@given(dags(), st.randoms())
def test_dependencies_come_first_and_input_order_does_not_matter(
        graph: dict[str, list[str]], rnd: random.Random) -> None:
    order = deploy_order(graph)
    position = {name: i for i, (name, _) in enumerate(order)}
    wave = dict(order)
    assert set(position) == set(graph)
    for name, deps in graph.items():
        for dep in deps:
            if dep in graph:
                assert position[dep] < position[name]
                assert wave[dep] < wave[name]
        inside = [d for d in deps if d in graph]
        assert wave[name] == (1 + max(wave[d] for d in inside) if inside else 0)
    shuffled = list(graph.items())
    rnd.shuffle(shuffled)
    assert deploy_order({k: list(reversed(v)) for k, v in shuffled}) == order


def test_a_cycle_is_named() -> None:
    with pytest.raises(InvalidInput, match=r"dependency cycle: a -> b -> c -> a"):
        deploy_order({"a": ["b"], "b": ["c"], "c": ["a"], "d": []})
    assert deploy_order({"a": ["a"]}) == [("a", 0)]
