"""The check catalog (recipes/checks.yaml): every check a recipe may name, as data.

The validator reads this to know what a check is: the phase it belongs to, whether it needs a
GPU, its default timeout, and the readings it emits (which the phase's constraints test, e.g.
`nccl-all-reduce-bw >= 300`). Recipes are checked against it at load, so a recipe cannot name
a check that no validator implements.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from cairn import yamlfile
from cairn.errors import InvalidInput
from cairn.recipes.model import Phase
from cairn.spec.duration import parse_duration

__all__ = ["CheckDefinition", "load_checks", "parse_duration"]

class CheckDefinition(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One entry of the check catalog."""

    name: str
    phase: Phase
    needs_gpu: bool
    timeout: str
    """Default timeout (`90s`, `5m`, `1h30m`, `cairn.spec.duration`); a recipe may override
    it."""
    description: str
    emits: dict[str, str] = {}
    """Reading name -> unit, for the phase constraints that test this check's result."""
    multi_node: bool = False

    @property
    def timeout_seconds(self) -> int:
        return parse_duration(self.timeout)


class CheckCatalogFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    checks: list[CheckDefinition]


def load_checks(path: str | Path) -> dict[str, CheckDefinition]:
    """Load recipes/checks.yaml into name -> definition (sorted by name).

    Raises:
        InvalidInput: a malformed file, a duplicate name or a bad timeout (naming the file).
    """
    doc = yamlfile.parse(
        yamlfile.read_text(path) if Path(path).is_file() else "", str(path)
    )
    if doc.data is None:
        raise InvalidInput("missing or empty check catalog", file=str(path))
    spec = yamlfile.convert(doc, CheckCatalogFile)
    out: dict[str, CheckDefinition] = {}
    for index, check in enumerate(spec.checks):
        line = doc.line_of(("checks", index))
        if check.name in out:
            raise InvalidInput(
                f"duplicate check {check.name!r}",
                file=str(path),
                line=line,
                field=f"checks[{index}].name",
            )
        try:
            parse_duration(check.timeout)
        except InvalidInput as exc:
            raise InvalidInput(
                exc.message, file=str(path), line=line, field=f"checks[{index}].timeout"
            ) from None
        out[check.name] = check
    return dict(sorted(out.items()))
