"""Which overlays apply to a query, in the order they are applied (AICR's matching rule).

A recipe field that is "any" is a wildcard and matches every query value; a query value "any"
matches only recipes that are "any" there too (wildcards go one way: asking for "any GPU" must
not pull in the H100 overlay). `nodes` works the same way with 0 as "any". Matches are ordered
least to most specific (the number of fields that are not "any"), ties by name, so the result
never depends on the order files were read.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.recipes.catalog import Catalog, RecipeEntry
from cairn.recipes.criteria import ANY
from cairn.recipes.model import CRITERIA_FIELDS, Criteria


def specificity(criteria: Criteria) -> int:
    """How many criteria fields are not "any" (nodes counts when it is not 0)."""
    fields: int = sum(getattr(criteria, f) != ANY for f in CRITERIA_FIELDS)
    return fields + (criteria.nodes != 0)


def matches(recipe: Criteria, query: Criteria) -> bool:
    """True when a recipe with `recipe` criteria applies to `query` (both normalised)."""
    for f in CRITERIA_FIELDS:
        have = getattr(recipe, f)
        if have != ANY and have != getattr(query, f):
            return False
    return recipe.nodes in (0, query.nodes)


@dataclass(frozen=True)
class _Index:
    """Overlays sorted by application order, and per field: value -> bitset of positions.

    Python ints are bitsets, so a 10,000-recipe match is a handful of big-int ANDs and ORs;
    bits come back in application order because positions follow (specificity, name).
    """

    ordered: list[str]
    by_field: dict[str, dict[str | int, int]]


def _index(catalog: Catalog) -> _Index:
    if isinstance(catalog._index, _Index):
        return catalog._index
    ordered = sorted(
        catalog.overlays, key=lambda n: (specificity(catalog.overlays[n].spec.criteria), n)
    )
    by_field: dict[str, dict[str | int, int]] = {f: {} for f in (*CRITERIA_FIELDS, "nodes")}
    for position, name in enumerate(ordered):
        crit = catalog.overlays[name].spec.criteria
        bit = 1 << position
        for f in (*CRITERIA_FIELDS, "nodes"):
            value = getattr(crit, f)
            by_field[f][value] = by_field[f].get(value, 0) | bit
    index = _Index(ordered, by_field)
    catalog._index = index
    return index


def match(catalog: Catalog, query: Criteria) -> list[RecipeEntry]:
    """Every overlay that applies to `query`, least to most specific, ties by name.

    The query is normalised first (aliases, implications), so it may use aliases.

    Raises:
        InvalidInput: the query uses a value the criteria catalog does not know.
    """
    q = catalog.criteria.normalize(query, where="query")
    index = _index(catalog)
    found = (1 << len(index.ordered)) - 1
    for f in (*CRITERIA_FIELDS, "nodes"):
        values = index.by_field[f]
        wanted = getattr(q, f)
        wildcard = 0 if f == "nodes" else ANY
        allowed = values.get(wildcard, 0)
        if wanted != wildcard:
            allowed |= values.get(wanted, 0)
        found &= allowed
        if not found:
            return []
    bits = bin(found)[:1:-1]  # least significant first
    out: list[RecipeEntry] = []
    position = bits.find("1")
    while position != -1:
        out.append(catalog.overlays[index.ordered[position]])
        position = bits.find("1", position + 1)
    return out
