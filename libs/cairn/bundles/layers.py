"""Per-component values: the recipe's, then override files (`--values`), then `--set`.

Each value keeps the layer that set it last. Recipe values carry the layer of the file that
set them (`base` for the root of the base chain, `overlay` for the other overlays, `mixin`),
taken from the resolver's own provenance, so `cairn bundle explain` and `cairn recipe explain`
agree on every recipe value. Override files and `--set` deep-merge on top the way the
resolver merges files: a mapping merges key by key, anything else replaces what was there,
and a replaced subtree's old origins are dropped with it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cairn import yamlfile
from cairn.bundles.model import Layer, ValueOrigin
from cairn.errors import InvalidInput
from cairn.recipes import Catalog, Recipe

Key = tuple[str, ...]
"""(component, "values", key, key, ...) or (component, field)."""


@dataclass
class ComposedValues:
    """Every component's values and the origin of every leaf."""

    values: dict[str, dict[str, Any]]
    origins: dict[Key, tuple[Any, Layer, str]] = field(default_factory=dict)

    def rows(self) -> list[ValueOrigin]:
        return [
            ValueOrigin(
                component=key[0], path=".".join(key[1:]), value=value, layer=layer, source=src
            )
            for key, (value, layer, src) in sorted(self.origins.items())
        ]

    def merge(self, component: str, update: dict[str, Any], layer: Layer, source: str) -> None:
        _deep_merge(self.values[component], update, (component, "values"), self.origins,
                    layer, source)


def recipe_layers(catalog: Catalog) -> dict[str, Layer]:
    """Layer of each catalog file: mixins, the root overlays (no base) and the others."""
    layers: dict[str, Layer] = {}
    for entry in catalog.overlays.values():
        layers[entry.file] = "base" if not entry.spec.base else "overlay"
    for entry in catalog.mixins.values():
        layers[entry.file] = "mixin"
    return layers


def from_recipe(recipe: Recipe, catalog: Catalog) -> ComposedValues:
    """The recipe's component values and fields, with the layer each came from."""
    layers = recipe_layers(catalog)
    composed = ComposedValues(
        values={c.name: copy.deepcopy(c.values) for c in recipe.components}
    )
    for item in recipe.provenance:
        if len(item.path) < 3 or item.path[0] != "components":
            continue
        name, rest = item.path[1], tuple(item.path[2:])
        if name not in composed.values or rest[0] in ("source", "enabled"):
            continue
        composed.origins[(name, *rest)] = (item.value, layers.get(item.file, "overlay"), item.file)
    return composed


def apply_override_file(composed: ComposedValues, path: Path, shown: str) -> None:
    """Merge one `--values` file: a mapping of component name to that component's values.

    Raises:
        InvalidInput: the file is not YAML, not a mapping of mappings, or names a component
            that is not in the bundle (naming file, line and field).
    """
    doc = yamlfile.parse(yamlfile.read_text(path, shown=shown), shown)
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        raise InvalidInput("expected a mapping of component name to values", file=shown,
                           line=doc.line_of(()))
    for name in data:
        where = (str(name),)
        if str(name) not in composed.values:
            raise InvalidInput(
                f"no component {name!r} in this bundle (components: "
                f"{', '.join(sorted(composed.values))})",
                file=shown, line=doc.line_of(where), field=str(name))
        body = data[name]
        if body is None:
            continue
        if not isinstance(body, dict):
            raise InvalidInput(f"expected a mapping of values, got {type(body).__name__}",
                               file=shown, line=doc.line_of(where), field=str(name))
        composed.merge(str(name), body, "override", shown)


def apply_set(composed: ComposedValues, assignment: str) -> None:
    """Apply one `--set COMPONENT.key.path=VALUE`; VALUE is read as a YAML scalar.

    Raises:
        InvalidInput: the assignment is malformed or names a component not in the bundle.
    """
    target, sep, raw = assignment.partition("=")
    keys = target.strip().split(".")
    if not sep or len(keys) < 2 or any(not k for k in keys):
        raise InvalidInput(f"expected COMPONENT.key.path=VALUE, got {assignment!r}",
                           field="--set")
    name = keys[0]
    if name not in composed.values:
        raise InvalidInput(
            f"no component {name!r} in this bundle (components: "
            f"{', '.join(sorted(composed.values))})",
            field="--set")
    value = _scalar(raw)
    update: dict[str, Any] = {keys[-1]: value}
    for key in reversed(keys[1:-1]):
        update = {key: update}
    composed.merge(name, update, "set", "--set")


def _scalar(raw: str) -> Any:
    """`true`, `3`, `1.5`, `null` as YAML reads them (as `helm --set` does); else the text."""
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        return raw
    return value if isinstance(value, str | int | float | bool) or value is None else raw


def _deep_merge(target: dict[str, Any], update: dict[str, Any], path: Key,
                origins: dict[Key, tuple[Any, Layer, str]], layer: Layer, source: str) -> None:
    for key in sorted(update, key=str):
        item, sub = update[key], (*path, str(key))
        nested = isinstance(item, dict) and bool(item)
        if not (nested and isinstance(target.get(key), dict)):
            for old in [p for p in origins if p[: len(sub)] == sub]:
                del origins[old]
            target[key] = {} if nested else copy.deepcopy(item)
        if nested:
            origins.pop(sub, None)  # an empty mapping that was a leaf is now a parent
            _deep_merge(target[key], item, sub, origins, layer, source)
        else:
            origins[sub] = (copy.deepcopy(item), layer, source)
