"""An AICR catalog: the parsed overlays, mixins, registry and validators of layered data.

Built from `DataFiles` (`cairn.recipes.aicr.datadir`): every overlay and mixin is decoded,
every `base` and `mixins` reference and every path a componentRef names is checked, and base
cycles are refused, before anything is resolved, so a bad catalog fails at load naming the
file and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cairn.errors import InvalidInput
from cairn.recipes.aicr.datadir import (
    VALIDATORS,
    DataFiles,
    checked_name,
    data_path,
    parse_mixin,
    parse_overlay,
    parse_validators,
    read_data_dir,
)
from cairn.recipes.aicr.model import (
    ComponentRef,
    RecipeMetadata,
    RecipeMixin,
    RegistryEntry,
    ValidatorEntry,
)

BASE = "base"
BASE_FILE = "overlays/base.yaml"


@dataclass
class AicrCatalog:
    """Overlays (base included) and mixins by name, the registry, validators and files."""

    overlays: dict[str, RecipeMetadata]
    mixins: dict[str, RecipeMixin]
    registry: dict[str, RegistryEntry]
    validators: dict[str, ValidatorEntry]
    data: DataFiles
    overlay_files: dict[str, str] = field(default_factory=dict)
    """Overlay or mixin name -> the file it came from, as errors name it."""

    @property
    def base(self) -> RecipeMetadata:
        return self.overlays[BASE]

    def file_of(self, name: str) -> str:
        return self.overlay_files.get(name, name)

    def read(self, rel: str) -> bytes | None:
        """A file of the data (a values file, a manifest), or None when there is none."""
        return self.data.files.get(rel)

    def chain(self, name: str) -> list[str]:
        """`name` and its bases up to (not including) `base`, root first.

        Raises:
            InvalidInput: a base that does not exist, or the chain loops.
        """
        out: list[str] = []
        current = name
        while current and current != BASE:
            if current in out:
                loop = " -> ".join([*out[out.index(current):], current])
                raise InvalidInput(f"base cycle: {loop}", file=self.file_of(name),
                                   field="spec.base")
            overlay = self.overlays.get(current)
            if overlay is None:
                raise InvalidInput(f"unknown base recipe {current!r}",
                                   file=self.file_of(out[-1] if out else name),
                                   field="spec.base")
            out.append(current)
            current = overlay.spec.base
        return out[::-1]


def load_aicr_catalog(data_dir: Path | None, lower: DataFiles | None = None) -> AicrCatalog:
    """The catalog of `data_dir` layered on `lower` (either may be absent, not both).

    Raises:
        InvalidInput: a file is malformed or inconsistent (naming it), or the result has no
            overlays/base.yaml.
    """
    data = lower or DataFiles()
    if data_dir is not None:
        data = data.layer(read_data_dir(data_dir))
    return build_catalog(data)


def build_catalog(data: DataFiles) -> AicrCatalog:
    """Parse and check layered data (see the module docstring)."""
    overlays: dict[str, RecipeMetadata] = {}
    mixins: dict[str, RecipeMixin] = {}
    where: dict[str, str] = {}
    for rel in sorted(data.files):
        folder, _, name = rel.partition("/")
        if "/" in name or not name.endswith(".yaml") or folder not in ("overlays", "mixins"):
            continue
        shown = data.shown(rel)
        if folder == "mixins":
            mixin = parse_mixin(data.files[rel], shown)
            _unique(mixin.metadata.name, where, shown)
            mixins[mixin.metadata.name] = mixin
            where[mixin.metadata.name] = shown
            continue
        overlay = parse_overlay(data.files[rel], shown)
        if overlay is None:
            continue
        name_of = BASE if rel == BASE_FILE else overlay.metadata.name
        _unique(name_of, where, shown)
        overlays[name_of] = overlay
        where[name_of] = shown
    if BASE not in overlays:
        raise InvalidInput("the recipe data has no overlays/base.yaml (give an AICR data "
                           "directory that holds one, or layer it on Cairn's catalog)",
                           file=data.shown("overlays") if data.files else None)
    validators: dict[str, ValidatorEntry] = {}
    if VALIDATORS in data.files:
        catalog_file = parse_validators(data.files[VALIDATORS], data.shown(VALIDATORS))
        validators = {v.name: v for v in catalog_file.validators}
    catalog = AicrCatalog(overlays=overlays, mixins=mixins, registry=dict(data.registry),
                          validators=validators, data=data, overlay_files=where)
    for name, overlay in overlays.items():
        _check_overlay(catalog, name, overlay)
    for name in overlays:
        if name != BASE:
            catalog.chain(name)
    for name, mixin in mixins.items():
        _check_refs(catalog, mixin.spec.component_refs, where[name])
    return catalog


def _unique(name: str, where: dict[str, str], file: str) -> None:
    if name in where:
        raise InvalidInput(f"{name!r} is also defined in {where[name]}", file=file,
                           field="metadata.name")


def _check_overlay(catalog: AicrCatalog, name: str, overlay: RecipeMetadata) -> None:
    file = catalog.file_of(name)
    spec = overlay.spec
    if name == BASE and spec.base:
        raise InvalidInput("base.yaml cannot have a base", file=file, field="spec.base")
    if spec.base and spec.base != BASE and spec.base not in catalog.overlays:
        raise InvalidInput(f"unknown base recipe {spec.base!r}", file=file, field="spec.base")
    for index, mixin in enumerate(spec.mixins):
        if mixin not in catalog.mixins:
            raise InvalidInput(f"unknown mixin {mixin!r} (mixins live in mixins/)", file=file,
                               field=f"spec.mixins[{index}]")
    _check_refs(catalog, spec.component_refs, file)


def _check_refs(catalog: AicrCatalog, refs: list[ComponentRef], file: str) -> None:
    for index, ref in enumerate(refs):
        at = f"spec.componentRefs[{index}]"
        checked_name(ref.name, "component", file=file, field_name=f"{at}.name")
        paths = [("valuesFile", ref.values_file)] if ref.values_file else []
        paths += [(f"manifestFiles[{i}]", m) for i, m in enumerate(ref.manifest_files)]
        for key, value in paths:
            rel = data_path(value, file=file, field_name=f"{at}.{key}")
            if rel not in catalog.data.files:
                raise InvalidInput(f"{value!r} is not in the recipe data", file=file,
                                   field=f"{at}.{key}")


def catalog_names(catalog: AicrCatalog) -> list[str]:
    """Overlay names, base first, then by name."""
    return [BASE, *sorted(n for n in catalog.overlays if n != BASE)]
