"""Chart repositories of a bundle, each with one stable alias.

Helm, Helmfile and Flux name repositories. The alias is the repository prefix a recipe's chart
already uses (`nvidia/gpu-operator` -> `nvidia`), else a slug of the URL; two URLs that would
share an alias get `-2`, `-3` in URL order, so aliases never depend on component order.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.bundles.model import PlannedComponent
from cairn.bundles.text import slug


@dataclass(frozen=True)
class Repository:
    alias: str
    url: str
    """As the recipe writes it: `https://...` or `oci://...`."""

    @property
    def is_oci(self) -> bool:
        return self.url.startswith("oci://")

    @property
    def bare_url(self) -> str:
        """The URL without `oci://`, as Helmfile and Argo CD write OCI registries."""
        return self.url.removeprefix("oci://").rstrip("/")


def repositories(components: list[PlannedComponent]) -> dict[str, Repository]:
    """Repository URL -> Repository, for every component that has a repository."""
    prefixes: dict[str, set[str]] = {}
    for component in components:
        if component.repository:
            found = prefixes.setdefault(component.repository, set())
            if "/" in component.chart:
                found.add(component.chart.split("/", 1)[0])
    out: dict[str, Repository] = {}
    taken: dict[str, int] = {}
    for url in sorted(prefixes):
        alias = min(prefixes[url]) if prefixes[url] else slug(url.split("://", 1)[-1])
        taken[alias] = taken.get(alias, 0) + 1
        if taken[alias] > 1:
            alias = f"{alias}-{taken[alias]}"
        out[url] = Repository(alias=alias, url=url)
    return out
