"""Deployment order from component dependencies: a stable topological order, and levels.

A dependency on a component that is not in the bundle (disabled, or never in the recipe) is
dropped: the bundle cannot order against what it does not deploy. Ties are broken by name, so
the order never depends on the order of the recipe's files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cairn.errors import InvalidInput


def deploy_order(dependencies: Mapping[str, Sequence[str]]) -> list[tuple[str, int]]:
    """Components in install order, each with its level (0 = depends on nothing here).

    Raises:
        InvalidInput: the dependencies form a cycle ("dependency cycle: a -> b -> a").
    """
    needs = {name: sorted({d for d in deps if d in dependencies and d != name})
             for name, deps in dependencies.items()}
    _refuse_cycles(needs)
    level: dict[str, int] = {}

    def depth(name: str) -> int:
        if name not in level:
            level[name] = 1 + max((depth(d) for d in needs[name]), default=-1)
        return level[name]

    for name in needs:
        depth(name)
    return sorted(((name, level[name]) for name in needs), key=lambda item: (item[1], item[0]))


def _refuse_cycles(needs: Mapping[str, Sequence[str]]) -> None:
    done: set[str] = set()
    for start in sorted(needs):
        stack: list[str] = []
        _visit(start, needs, stack, done)


def _visit(name: str, needs: Mapping[str, Sequence[str]], stack: list[str],
           done: set[str]) -> None:
    if name in done:
        return
    if name in stack:
        loop = [*stack[stack.index(name):], name]
        raise InvalidInput("dependency cycle: " + " -> ".join(loop),
                           field=f"components.{loop[0]}.dependencies")
    stack.append(name)
    for dep in needs[name]:
        _visit(dep, needs, stack, done)
    stack.pop()
    done.add(name)
