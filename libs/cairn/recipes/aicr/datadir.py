"""Reading an AICR data directory (`--data DIR`) at bounded cost, and layering it.

A data directory holds `registry.yaml`, `overlays/`, `mixins/`, `components/<name>/...`
(values files and manifests), `checks/` and `validators/catalog.yaml`. It is read the way
AICR's external data provider reads one: regular files only (a symlink anywhere inside is
refused, so a directory cannot reach outside itself), no file over 10 MiB, and every path a
recipe names (`valuesFile`, `manifestFiles`) relative, inside the directory, with no `..`.
Each refusal is one `InvalidInput` (exit 3) naming the file.

Layering follows AICR: `registry.yaml` merges by component name (the upper layer's entry
replaces the lower one's, new names are added) and every other file replaces the file at the
same path below it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cairn import files, yamlfile
from cairn.errors import InvalidInput, InvalidName
from cairn.names import check_name
from cairn.recipes.aicr.model import (
    API_VERSIONS,
    ComponentRegistry,
    RecipeMetadata,
    RecipeMixin,
    RegistryEntry,
    ValidatorCatalog,
)

MAX_FILE_BYTES = 10 * files.MIB
"""AICR's limit on one file of a data directory."""
MAX_FILES = 20_000
MAX_TOTAL_BYTES = 512 * files.MIB
MAX_DEPTH = 16
REGISTRY = "registry.yaml"
VALIDATORS = "validators/catalog.yaml"
_READ = ("overlays", "mixins", "components", "checks", "validators")
"""Top-level folders Cairn reads; anything else (README.md, data.go) is not recipe data."""


@dataclass
class DataFiles:
    """The files of one or more layered data directories: relative path -> bytes."""

    files: dict[str, bytes] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    """Relative path -> how the file is named in errors (its layer's directory + path)."""
    registry: dict[str, RegistryEntry] = field(default_factory=dict)
    registry_origin: dict[str, str] = field(default_factory=dict)

    def shown(self, rel: str) -> str:
        return self.origin.get(rel, rel)

    def layer(self, upper: DataFiles) -> DataFiles:
        """This data with `upper` on top, by AICR's rules."""
        return DataFiles(files={**self.files, **upper.files},
                         origin={**self.origin, **upper.origin},
                         registry={**self.registry, **upper.registry},
                         registry_origin={**self.registry_origin, **upper.registry_origin})


def read_data_dir(root: Path) -> DataFiles:
    """Every recipe file under `root`, checked as described above.

    Raises:
        InvalidInput: `root` is missing or not a folder, has no registry.yaml, or holds a
            symlink, an over-size file, a non-regular file or too many files.
    """
    shown_root = str(root)
    try:
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        raise InvalidInput("no such data directory", file=shown_root) from None
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror or exc}", file=shown_root) from None
    if not stat.S_ISDIR(mode):
        raise InvalidInput("not a directory (--data takes an AICR data directory)",
                           file=shown_root)
    data = DataFiles()
    total = 0
    for rel, path in _walk(root, PurePosixPath(), 0):
        if rel.parts[0] not in _READ and str(rel) != REGISTRY:
            continue
        shown = os.path.join(shown_root, str(rel))
        content = files.read_bytes(path, limit=MAX_FILE_BYTES, shown=shown)
        total += len(content)
        if len(data.files) >= MAX_FILES or total > MAX_TOTAL_BYTES:
            raise InvalidInput(f"holds more than {MAX_FILES} files or {MAX_TOTAL_BYTES} bytes "
                               "of recipe data", file=shown_root)
        data.files[str(rel)] = content
        data.origin[str(rel)] = shown
    if REGISTRY not in data.files:
        raise InvalidInput("not an AICR data directory: no registry.yaml", file=shown_root)
    registry = parse_registry(data.files.pop(REGISTRY), data.origin.pop(REGISTRY))
    data.registry = {entry.name: entry for entry in registry.components}
    data.registry_origin = {name: os.path.join(shown_root, REGISTRY) for name in data.registry}
    return data


def _walk(root: Path, rel: PurePosixPath, depth: int) -> list[tuple[PurePosixPath, Path]]:
    """Regular files below `root / rel`, sorted; refuses symlinks and odd files."""
    if depth > MAX_DEPTH:
        raise InvalidInput(f"nested deeper than {MAX_DEPTH} folders", file=str(root / rel))
    out: list[tuple[PurePosixPath, Path]] = []
    try:
        entries = sorted(os.scandir(root / rel), key=lambda e: e.name)
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror or exc}", file=str(root / rel)) from None
    for entry in entries:
        sub = rel / entry.name
        shown = str(root / sub)
        if entry.is_symlink():
            raise InvalidInput("a symlink: refused (a data directory holds regular files "
                               "only, so nothing in it can point outside it)", file=shown)
        if entry.is_dir(follow_symlinks=False):
            if depth == 0 and entry.name not in _READ:
                continue
            out += _walk(root, sub, depth + 1)
        elif entry.is_file(follow_symlinks=False):
            if entry.stat(follow_symlinks=False).st_size > MAX_FILE_BYTES:
                raise files.too_large(shown, MAX_FILE_BYTES)
            out.append((sub, Path(entry.path)))
        elif depth > 0 or entry.name == REGISTRY:
            raise InvalidInput("not a regular file", file=shown)
    return out


def data_path(value: str, *, file: str, field_name: str) -> str:
    """A path a recipe names (`valuesFile`, `manifestFiles`), checked to stay inside the data.

    Raises:
        InvalidInput: absolute, or climbing out with `..` (naming the recipe file and field).
    """
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value \
            or value.startswith("~"):
        raise InvalidInput(f"{value!r}: a path must be relative and inside the data directory "
                           "(no '..', not absolute)", file=file, field=field_name)
    return str(path)


def checked_name(value: str, kind: str, *, file: str, field_name: str) -> str:
    """`value` if it obeys Cairn's name rule (AICR's names are DNS labels too): names become
    file names in bundles and imported catalogs, so none may hold a `/` or `..`.

    Raises:
        InvalidName: naming the file and field.
    """
    try:
        return check_name(value, kind)
    except InvalidName as exc:
        raise InvalidName(exc.message, file=file, field=field_name) from None


def _check_header(kind: str, api_version: str, want: str, file: str) -> None:
    if kind and kind != want:
        raise InvalidInput(f"kind is {kind!r}, expected {want!r}", file=file, field="kind")
    if api_version and api_version not in API_VERSIONS:
        raise InvalidInput(f"unknown apiVersion {api_version!r}; known: "
                           f"{', '.join(API_VERSIONS)}", file=file, field="apiVersion")


def parse_yaml(content: bytes, file: str) -> yamlfile.YamlDocument:
    """One YAML file of a data directory, with Cairn's node and depth limits."""
    env = yamlfile.YamlLimits.from_env()
    limits = yamlfile.YamlLimits(max_bytes=MAX_FILE_BYTES, max_nodes=env.max_nodes,
                                 max_depth=env.max_depth)
    return yamlfile.parse(files.decode_utf8(content, file), file, limits=limits)


def parse_registry(content: bytes, file: str) -> ComponentRegistry:
    doc = parse_yaml(content, file)
    if not isinstance(doc.data, dict):
        raise InvalidInput("expected a ComponentRegistry mapping", file=file)
    registry = yamlfile.convert(doc, ComponentRegistry)
    _check_header(registry.kind, registry.api_version, "ComponentRegistry", file)
    seen: set[str] = set()
    for index, entry in enumerate(registry.components):
        checked_name(entry.name, "component", file=file, field_name=f"components[{index}].name")
        if entry.name in seen:
            raise InvalidInput(f"component {entry.name!r} is listed twice", file=file,
                               line=doc.line_of(("components", index)),
                               field=f"components[{index}].name")
        seen.add(entry.name)
    return registry


def parse_overlay(content: bytes, file: str) -> RecipeMetadata | None:
    """An overlay file; None for YAML of another kind (AICR skips it)."""
    doc = parse_yaml(content, file)
    if not isinstance(doc.data, dict):
        raise InvalidInput("expected a RecipeMetadata mapping", file=file)
    kind = doc.data.get("kind")
    if kind not in (None, "", "RecipeMetadata"):
        return None
    overlay = yamlfile.convert(doc, RecipeMetadata)
    _check_header(overlay.kind, overlay.api_version, "RecipeMetadata", file)
    if not overlay.metadata.name:
        raise InvalidInput("missing metadata.name", file=file, field="metadata.name")
    checked_name(overlay.metadata.name, "recipe", file=file, field_name="metadata.name")
    return overlay


def parse_mixin(content: bytes, file: str) -> RecipeMixin:
    doc = parse_yaml(content, file)
    if not isinstance(doc.data, dict):
        raise InvalidInput("expected a RecipeMixin mapping", file=file)
    mixin = yamlfile.convert(doc, RecipeMixin)
    _check_header(mixin.kind, mixin.api_version, "RecipeMixin", file)
    if mixin.kind != "RecipeMixin":
        raise InvalidInput("a file in mixins/ must be kind RecipeMixin", file=file, field="kind")
    if not mixin.metadata.name:
        raise InvalidInput("missing metadata.name", file=file, field="metadata.name")
    checked_name(mixin.metadata.name, "recipe", file=file, field_name="metadata.name")
    return mixin


def parse_validators(content: bytes, file: str) -> ValidatorCatalog:
    doc = parse_yaml(content, file)
    if not isinstance(doc.data, dict):
        raise InvalidInput("expected a ValidatorCatalog mapping", file=file)
    catalog = yamlfile.convert(doc, ValidatorCatalog)
    if catalog.kind and catalog.kind != "ValidatorCatalog":
        raise InvalidInput(f"kind is {catalog.kind!r}, expected 'ValidatorCatalog'", file=file,
                           field="kind")
    return catalog
