"""The criteria catalog (recipes/criteria.yaml): allowed values, aliases and implications.

Every criteria value a recipe or a query uses is normalised here: lowercased, aliases mapped
(`al2023` -> `amazonlinux`, `self-managed` -> `any`), then checked against the catalog, so a
value nobody declared is an error that lists the allowed ones. Adding a GPU is one line in the
YAML file. Implications fill a dimension left "any" (e.g. `service: eks` implies
`scheduler: kubernetes`), for recipes and queries alike, so specificity stays comparable.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from cairn import yamlfile
from cairn.errors import InvalidInput
from cairn.recipes.model import CRITERIA_FIELDS, Criteria

ANY = "any"

MAX_NODES = 100_000
"""The most nodes a recipe or a query may name (docs/limits.md)."""


class Dimension(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    values: list[str]
    aliases: dict[str, str] = {}


class Implication(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    when: dict[str, list[str]]
    """Dimension -> values that trigger the implication."""
    set: dict[str, str]
    """Dimension -> value filled in when that dimension is "any"."""


class CriteriaFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    service: Dimension
    accelerator: Dimension
    os: Dimension
    intent: Dimension
    platform: Dimension
    scheduler: Dimension
    implies: list[Implication] = []


class CriteriaCatalog:
    """Allowed criteria values; normalises and checks recipe criteria and queries."""

    def __init__(self, spec: CriteriaFile, file: str = "criteria.yaml") -> None:
        self.file = file
        self.dimensions: dict[str, Dimension] = {f: getattr(spec, f) for f in CRITERIA_FIELDS}
        self.implies = spec.implies
        for dim in self.dimensions.values():
            dim.values = sorted({v.lower() for v in dim.values} - {ANY})
            dim.aliases = {k.lower(): v.lower() for k, v in dim.aliases.items()}
        self._check_self()

    def _check_self(self) -> None:
        for field, dim in self.dimensions.items():
            for alias, target in dim.aliases.items():
                if target != ANY and target not in dim.values:
                    raise InvalidInput(
                        f"alias {alias!r} points to unknown value {target!r}",
                        file=self.file,
                        field=f"{field}.aliases",
                    )
        for index, rule in enumerate(self.implies):
            for field, values in [*rule.when.items(), *((k, [v]) for k, v in rule.set.items())]:
                where = f"implies[{index}].{field}"
                if field not in self.dimensions:
                    raise InvalidInput(f"unknown dimension {field!r}", file=self.file, field=where)
                for value in values:
                    self.value(field, value, where=where, file=self.file)

    def allowed(self, field: str) -> list[str]:
        """Allowed values of one dimension, "any" first."""
        return [ANY, *self.dimensions[field].values]

    def value(
        self,
        field: str,
        raw: str,
        *,
        where: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> str:
        """Normalise one value of dimension `field`, or raise InvalidInput listing the choices."""
        dim = self.dimensions[field]
        text = (raw or ANY).strip().lower()
        text = dim.aliases.get(text, text)
        if text != ANY and text not in dim.values:
            raise InvalidInput(
                f"unknown {field} {raw!r}; allowed: {', '.join(self.allowed(field))}",
                field=where or field,
                file=file,
                line=line,
            )
        return text

    def normalize(
        self,
        criteria: Criteria,
        *,
        where: str = "criteria",
        file: str | None = None,
        line: int | None = None,
    ) -> Criteria:
        """Normalise every field, then apply implications to fields left "any".

        Raises:
            InvalidInput: an unknown value, a negative node count, or a value that contradicts
                an implication (e.g. `service: eks` with `scheduler: slurm`).
        """
        fields = {
            f: self.value(f, getattr(criteria, f), where=f"{where}.{f}", file=file, line=line)
            for f in CRITERIA_FIELDS
        }
        if criteria.nodes < 0:
            raise InvalidInput(
                "nodes must be 0 (any) or more", field=f"{where}.nodes", file=file, line=line
            )
        if criteria.nodes > MAX_NODES:
            raise InvalidInput(f"{criteria.nodes} is more than the limit of {MAX_NODES} nodes",
                               field=f"{where}.nodes", file=file, line=line)
        for rule in self.implies:
            if not all(fields[k] in vs for k, vs in rule.when.items()):
                continue
            for key, implied in rule.set.items():
                if fields[key] == ANY:
                    fields[key] = implied
                elif fields[key] != implied:
                    cause = ", ".join(f"{k}={fields[k]}" for k in sorted(rule.when))
                    raise InvalidInput(
                        f"{cause} implies {key}={implied}, not {fields[key]}",
                        field=f"{where}.{key}",
                        file=file,
                        line=line,
                    )
        return Criteria(nodes=criteria.nodes, **fields)


def load_criteria(path: str | Path) -> CriteriaCatalog:
    """Load and check recipes/criteria.yaml."""
    spec = yamlfile.load(path, CriteriaFile)
    return CriteriaCatalog(spec, file=str(path))


def parse_assignments(pairs: list[str] | tuple[str, ...]) -> Criteria:
    """Turn `["service=eks", "nodes=2"]` (the CLI's `--criteria`) into a raw Criteria."""
    fields: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in (*CRITERIA_FIELDS, "nodes"):
            raise InvalidInput(
                f"expected KEY=VALUE with KEY one of "
                f"{', '.join((*CRITERIA_FIELDS, 'nodes'))}; got {pair!r}",
                field="criteria",
            )
        if key == "nodes":
            try:
                fields[key] = int(value)
            except ValueError:
                raise InvalidInput(
                    f"nodes must be an integer, got {value!r}", field="criteria.nodes"
                ) from None
        else:
            fields[key] = value.strip()
    return msgspec.convert(fields, Criteria)
