"""Comparing two bundles: components added and removed, chart versions and values changed.

Works from the two manifests alone. Values are compared leaf by leaf (a list is one leaf), so
the report names exactly the keys an upgrade changes; what the upgrade could destroy (a
removed component, a moved namespace, a downgrade, ...) is listed first.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cairn.bundles.model import BundleManifest, PlannedComponent
from cairn.bundles.risks import UpgradeRisk, upgrade_risks

_MISSING = object()


class ValueChange(msgspec.Struct, kw_only=True, frozen=True):
    path: str
    """Dotted path inside the component's values."""
    old: Any = None
    new: Any = None
    change: str
    """`added`, `removed` or `changed`."""


class ComponentChange(msgspec.Struct, kw_only=True, frozen=True):
    name: str
    fields: dict[str, list[Any]] = {}
    """Changed fields other than values, as [old, new]: version, chart, repository, ..."""
    values: list[ValueChange] = []


class BundleDiff(msgspec.Struct, kw_only=True, frozen=True):
    old: str
    new: str
    """The two recipes."""
    added: list[str] = []
    removed: list[str] = []
    changed: list[ComponentChange] = []
    risks: list[UpgradeRisk] = []
    """What the upgrade could destroy or break (see `cairn.bundles.risks`)."""

    @property
    def empty(self) -> bool:
        # A risk without a component change is a bundle-wide one (k0rdent's selector).
        return not (self.added or self.removed or self.changed or self.risks)


def leaves(values: Any, prefix: str = "") -> dict[str, Any]:
    """`{a: {b: 1}}` -> `{"a.b": 1}`; an empty mapping is a leaf of its own."""
    if isinstance(values, dict) and values:
        out: dict[str, Any] = {}
        for key in sorted(values, key=str):
            out.update(leaves(values[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: values} if prefix else {}


_FIELDS = ("chart", "repository", "version", "namespace", "dependencies")


def _component(old: PlannedComponent, new: PlannedComponent) -> ComponentChange | None:
    fields = {f: [getattr(old, f), getattr(new, f)] for f in _FIELDS
              if getattr(old, f) != getattr(new, f)}
    before, after = leaves(old.values), leaves(new.values)
    values = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path, _MISSING), after.get(path, _MISSING)
        if a is _MISSING:
            values.append(ValueChange(path=path, new=b, change="added"))
        elif b is _MISSING:
            values.append(ValueChange(path=path, old=a, change="removed"))
        elif a != b or type(a) is not type(b):
            values.append(ValueChange(path=path, old=a, new=b, change="changed"))
    if not fields and not values:
        return None
    return ComponentChange(name=new.name, fields=fields, values=values)


def diff_bundles(old: BundleManifest, new: BundleManifest) -> BundleDiff:
    before = {c.name: c for c in old.components}
    after = {c.name: c for c in new.components}
    changed = [change for name in sorted(set(before) & set(after))
               if (change := _component(before[name], after[name])) is not None]
    return BundleDiff(old=old.recipe, new=new.recipe,
                      added=sorted(set(after) - set(before)),
                      removed=sorted(set(before) - set(after)), changed=changed,
                      risks=upgrade_risks(old, new))


def _show(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."


def diff_markdown(diff: BundleDiff, old: BundleManifest, new: BundleManifest) -> str:
    """The diff as Markdown for a pull request."""
    if diff.empty:
        return f"No changes between the bundles ({diff.old} -> {diff.new}).\n"
    after = {c.name: c for c in new.components}
    before = {c.name: c for c in old.components}
    lines = [f"## Bundle changes: {diff.old} -> {diff.new}", ""]
    if diff.risks:
        lines += ["### Upgrade risks", "", "| component | risk | what happens |", "|---|---|---|"]
        lines += [f"| {r.component} | {r.risk} | {r.detail} |" for r in diff.risks] + [""]
    if diff.added:
        lines += ["### Components added", ""]
        lines += [f"- `{n}` {after[n].chart} {after[n].version}" for n in diff.added] + [""]
    if diff.removed:
        lines += ["### Components removed", ""]
        lines += [f"- `{n}` {before[n].chart} {before[n].version}" for n in diff.removed] + [""]
    versions = [c for c in diff.changed if "version" in c.fields]
    if versions:
        lines += ["### Chart versions changed", "", "| component | old | new |", "|---|---|---|"]
        lines += [f"| {c.name} | {c.fields['version'][0]} | {c.fields['version'][1]} |"
                  for c in versions] + [""]
    others = [(c, f) for c in diff.changed for f in c.fields if f != "version"]
    if others:
        lines += ["### Other component fields changed", "", "| component | field | old | new |",
                  "|---|---|---|---|"]
        lines += [f"| {c.name} | {f} | {_show(c.fields[f][0])} | {_show(c.fields[f][1])} |"
                  for c, f in others] + [""]
    valued = [c for c in diff.changed if c.values]
    if valued:
        lines += ["### Values changed", "", "| component | value | old | new |",
                  "|---|---|---|---|"]
        for c in valued:
            for v in c.values:
                old_text = "(absent)" if v.change == "added" else f"`{_show(v.old)}`"
                new_text = "(absent)" if v.change == "removed" else f"`{_show(v.new)}`"
                lines.append(f"| {c.name} | `{v.path}` | {old_text} | {new_text} |")
        lines.append("")
    return "\n".join(lines)
