"""AICR's data and shapes on `cairn recipe`: `--data DIR`, `--format aicr` and `import`.

`--data DIR` reads an AICR data directory. One that holds `overlays/base.yaml` is a complete
catalog and is used alone (as `aicr recipe --data` would answer from it); one without is
layered on Cairn's own catalog (its Kubernetes recipes, in AICR's shape), with AICR's
layering rules: registry entries merge by component name, other files replace.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import msgspec

from cairn.cli.output import Column, emit, output_option, print_table
from cairn.errors import InvalidInput
from cairn.recipes.aicr.catalog import BASE_FILE, AicrCatalog, build_catalog
from cairn.recipes.aicr.convert import cairn_data, result_document
from cairn.recipes.aicr.datadir import read_data_dir
from cairn.recipes.aicr.model import AicrCriteria, RecipeResult
from cairn.recipes.aicr.resolve import resolve
from cairn.recipes.catalog import ENV_CATALOG

FORMATS = ("cairn", "aicr")


def data_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--data", "data_dir", type=click.Path(path_type=Path), default=None, metavar="DIR",
        help="An AICR data directory (registry.yaml, overlays/, mixins/, components/, ...), "
             "resolved with AICR's rules: alone when it holds overlays/base.yaml, else "
             "layered on Cairn's catalog.")(func)


def format_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--format", "shape", type=click.Choice(FORMATS), default=None,
        help="Shape of the recipe printed: cairn (default) or aicr (one RecipeResult "
             "document, as `aicr recipe` writes it; the default with --data).")(func)


def load_aicr(data_dir: Path, catalog_dir: str | None) -> AicrCatalog:
    """`data_dir` alone, or on Cairn's catalog (see the module docstring).

    Raises:
        InvalidInput: the data directory is refused, or it needs Cairn's catalog and that
            does not load.
    """
    from cairn.recipes import load_catalog

    upper = read_data_dir(data_dir)
    if BASE_FILE in upper.files:
        return build_catalog(upper)
    lower = cairn_data(load_catalog(Path(catalog_dir) if catalog_dir else None))
    return build_catalog(lower.layer(upper))


def aicr_query(given: dict[str, Any]) -> AicrCriteria:
    """The AICR query the given criteria make; AICR has no scheduler dimension."""
    if given.get("scheduler") not in (None, "any"):
        raise InvalidInput("AICR's criteria have no scheduler (its recipes are all "
                           "Kubernetes); leave --scheduler out with --data", field="scheduler")
    fields = {k: v for k, v in given.items() if k != "scheduler"}
    return msgspec.convert(fields, AicrCriteria)


def aicr_result(catalog: AicrCatalog, name: str | None, given: dict[str, Any],
                snapshot: Path | None) -> RecipeResult:
    """Resolve by criteria, or by an overlay NAME (its own criteria are the query)."""
    if (name is None) == (not given):
        raise click.UsageError("give a recipe NAME or criteria (--service, --accelerator, ... "
                               "or --criteria FILE), not both")
    if name is not None:
        overlay = catalog.overlays.get(name)
        if overlay is None:
            raise click.UsageError(f"no overlay named {name!r} in the AICR data")
        query = overlay.spec.criteria or AicrCriteria()
    else:
        query = aicr_query(given)
    judge = None
    if snapshot is not None:
        from cairn.recipes.aicr.snapshots import snapshot_judge

        judge = snapshot_judge(snapshot)
    return resolve(catalog, query, judge)


def list_aicr(catalog: AicrCatalog, mixins: bool, given: dict[str, Any], output: str) -> None:
    """The data's overlays (and mixins), or those whose own criteria are exactly `given`."""
    from cairn.recipes.aicr.resolve import normalize, specificity

    want = msgspec.to_builtins(normalize(aicr_query(given))) if given else None
    rows = []
    for name in sorted(catalog.overlays):
        criteria = catalog.overlays[name].spec.criteria or AicrCriteria()
        shown = msgspec.to_builtins(normalize(criteria))
        if want is not None and any(shown.get(k, 0 if k == "nodes" else "any") != v
                                    for k, v in want.items() if k in given):
            continue
        rows.append({"name": name, "kind": "overlay", "file": catalog.file_of(name),
                     "base": catalog.overlays[name].spec.base or None,
                     "mixins": catalog.overlays[name].spec.mixins, "criteria": shown,
                     "specificity": specificity(criteria)})
    if mixins and want is None:
        rows += [{"name": n, "kind": "mixin", "file": catalog.file_of(n), "base": None,
                  "mixins": [], "criteria": None, "specificity": None}
                 for n in sorted(catalog.mixins)]
    emit(rows, output, lambda rs: print_table(
        "AICR recipes", [Column("name", keep=True), Column("kind"),
                         Column("criteria (not any)", wrap=True), Column("base", keep=True)],
        [[r["name"], r["kind"],
          " ".join(f"{k}={v}" for k, v in (r["criteria"] or {}).items()
                   if v not in ("any", 0)) or ("(everywhere)" if r["kind"] == "overlay"
                                               else ""), r["base"] or ""] for r in rs]))


def print_result(doc: dict[str, Any]) -> None:
    meta = doc.get("metadata", {})
    click.echo("applied: " + " -> ".join(meta.get("appliedOverlays", [])))
    if meta.get("appliedMixins"):
        click.echo("mixins: " + ", ".join(meta["appliedMixins"]))
    for excluded in meta.get("excludedOverlays", []):
        click.echo(f"excluded: {excluded['name']} ({excluded.get('reason', '')})")
    print_table("constraints", [Column("name", keep=True), Column("value", wrap=True)],
                [[c["name"], c.get("value", "")] for c in doc.get("constraints", [])])
    order = {name: i for i, name in enumerate(doc.get("deploymentOrder", []), 1)}
    print_table("componentRefs (in deployment order)",
                [Column("#"), Column("name", keep=True), Column("version"),
                 Column("source", wrap=True), Column("namespace"),
                 Column("needs", wrap=True)],
                sorted([[order.get(r["name"], 0), r["name"], r.get("version", ""),
                         r.get("source", ""), r.get("namespace", ""),
                         ", ".join(r.get("dependencyRefs", []))]
                        for r in doc.get("componentRefs", [])]))
    rows = []
    for phase, body in (doc.get("validation") or {}).items():
        rows += [[phase, "check", check, ""] for check in body.get("checks", [])]
        rows += [[phase, "constraint", c["name"], c.get("value", "")]
                 for c in body.get("constraints", [])]
    print_table("validation", [Column("phase"), Column("kind"), Column("name", keep=True),
                               Column("value", wrap=True)], rows)


def show_aicr(result: RecipeResult, output: str) -> None:
    emit(result_document(result), output, print_result)


_IMPORT_HELP = """Convert the AICR data directory DIR into a Cairn catalog in --out OUT
(criteria.yaml, checks.yaml, overlays/, mixins/), and list, one line each,
what Cairn's catalog form cannot carry (manifests, Kustomize components,
constraint units, phase timeouts, values-file precedence it cannot express).
The catalog written is loaded back before the command returns.

\b
  cairn recipe import ./my-aicr-data --out ./catalog
  cairn recipe list --catalog ./catalog

Exit codes: 0 written; 3 DIR is refused or malformed; 6 OUT exists and is
not empty (--force replaces a catalog this command wrote).
"""


@click.command("import", help=_IMPORT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              metavar="OUT", help="Directory to write the Cairn catalog to.")
@click.option("--force", is_flag=True, help="Replace a catalog written here before.")
@click.option("--catalog", "catalog_dir", type=click.Path(file_okay=False), envvar=ENV_CATALOG,
              default=None, help="Cairn catalog a partial DIR is layered on (as --data).")
@output_option()
def import_cmd(directory: Path, out: Path, force: bool, catalog_dir: str | None,
               output: str) -> None:
    import shutil

    from cairn.errors import Conflict
    from cairn.recipes import load_catalog
    from cairn.recipes.aicr.importer import import_catalog, write_imported

    imported = import_catalog(load_aicr(directory, catalog_dir))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise Conflict("exists and is not empty (use --force to replace an imported "
                           "catalog)", file=str(out))
        if not (out / "criteria.yaml").is_file():
            raise Conflict("exists and is not a catalog (no criteria.yaml); not replacing it",
                           file=str(out))
        shutil.rmtree(out)
    write_imported(imported, out)
    catalog = load_catalog(out)
    data = {"out": str(out), "overlays": len(catalog.overlays), "mixins": len(catalog.mixins),
            "checks": len(catalog.checks), "not_carried": imported.lost}

    def show(d: dict[str, Any]) -> None:
        click.echo(f"wrote {d['overlays']} overlays, {d['mixins']} mixins and {d['checks']} "
                   f"checks to {d['out']}")
        if d["not_carried"]:
            click.echo(f"not carried over ({len(d['not_carried'])}):")
            for line in d["not_carried"]:
                click.echo(f"  {line}")
        else:
            click.echo("everything was carried over")

    emit(data, output, show)
