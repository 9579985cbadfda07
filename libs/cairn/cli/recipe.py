"""`cairn recipe`: list, match, show, explain, query and lint recipes. Parsing and printing only.

Every command takes the same criteria, as AICR's do: `--service --accelerator --os --intent
--platform --scheduler --nodes`, and `--criteria FILE` (`cairn.cli.recipecriteria`). A recipe
NAME may be any unique prefix of its name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import msgspec
import yaml

from cairn.cli.output import Column, emit, output_option, print_table
from cairn.cli.recipeaicr import (
    aicr_result,
    data_option,
    format_option,
    import_cmd,
    load_aicr,
    show_aicr,
)
from cairn.cli.recipecriteria import criteria_options, given_criteria, query_of
from cairn.client.prefix import resolve_prefix
from cairn.recipes import (
    Catalog,
    Criteria,
    Recipe,
    load_catalog,
    match,
    query_value,
    resolve,
    specificity,
)
from cairn.recipes.catalog import ENV_CATALOG, RecipeEntry
from cairn.recipes.model import CRITERIA_FIELDS


def _catalog_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--catalog",
        "catalog_dir",
        type=click.Path(file_okay=False),
        envvar=ENV_CATALOG,
        default=None,
        help=f"Recipe catalog directory (default: the repository's recipes/; ${ENV_CATALOG}).",
    )(func)


def _load(catalog_dir: str | None) -> Catalog:
    return load_catalog(Path(catalog_dir) if catalog_dir else None)


def recipe_named(catalog: Catalog, name: str) -> str:
    """The overlay or mixin `name` stands for: itself, or the one whose name it begins."""
    return resolve_prefix(name, [*catalog.overlays, *catalog.mixins], kind="recipe",
                          where=f"in {catalog.root}")


def _entry_dict(entry: RecipeEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "kind": entry.kind,
        "file": entry.file,
        "description": entry.spec.description,
        "base": entry.spec.base or None,
        "mixins": entry.spec.mixins,
        "criteria": msgspec.to_builtins(entry.spec.criteria, order="deterministic")
        if entry.kind == "overlay"
        else None,
        "specificity": specificity(entry.spec.criteria) if entry.kind == "overlay" else None,
    }


def _entries_table(title: str) -> Callable[[list[dict[str, Any]]], None]:
    def show(rows: list[dict[str, Any]]) -> None:
        table = []
        for index, row in enumerate(rows, 1):
            crit = row["criteria"] or {}
            where = " ".join(f"{k}={v}" for k, v in crit.items() if v not in ("any", 0))
            table.append(
                [index, row["name"], row["kind"], where or "(everywhere)", row["base"] or ""]
            )
        print_table(title, [Column("#"), Column("name", keep=True), Column("kind"),
                            Column("criteria (not any)", wrap=True), Column("base", keep=True)],
                    table)

    return show


@click.group(help="List, match, show and explain recipes (what a site should be).")
def recipe() -> None:
    pass


@recipe.command("list", help="List the catalog's overlays (and mixins with --mixins); with "
                "criteria, the overlays whose own criteria are exactly those given.")
@criteria_options
@click.option("--mixins", is_flag=True, help="Include mixins.")
@_catalog_option
@data_option
@output_option()
def list_cmd(mixins: bool, catalog_dir: str | None, data_dir: Path | None, output: str,
             **given: Any) -> None:
    if data_dir is not None:
        from cairn.cli.recipeaicr import list_aicr

        list_aicr(load_aicr(data_dir, catalog_dir), mixins, given_criteria(given), output)
        return
    catalog = _load(catalog_dir)
    criteria = given_criteria(given)
    wanted = _exact_filter(catalog, criteria)
    entries = [e for e in catalog.overlays.values() if wanted(e.spec.criteria)]
    if mixins and not criteria:
        entries += list(catalog.mixins.values())
    emit([_entry_dict(e) for e in entries], output, _entries_table("recipes"))


def _exact_filter(catalog: Catalog, given: dict[str, Any]) -> Callable[[Criteria], bool]:
    want = {f: catalog.criteria.value(f, given[f], where=f"criteria.{f}")
            for f in CRITERIA_FIELDS if f in given}
    nodes = given.get("nodes")
    return lambda c: (
        all(getattr(c, f) == v for f, v in want.items()) and (nodes is None or c.nodes == nodes)
    )


@recipe.command("match", help="Overlays that apply to a query, in the order they are applied "
                "(with --data, by AICR's rules over that data).")
@criteria_options
@_catalog_option
@data_option
@output_option()
def match_cmd(catalog_dir: str | None, data_dir: Path | None, output: str,
              **given: Any) -> None:
    if data_dir is not None:
        from cairn.cli.recipeaicr import aicr_query
        from cairn.recipes.aicr import match as aicr_match

        aicr = load_aicr(data_dir, catalog_dir)
        names = aicr_match(aicr, aicr_query(given_criteria(given)))
        rows = [{"name": n, "file": aicr.file_of(n),
                 "criteria": msgspec.to_builtins(aicr.overlays[n].spec.criteria)}
                for n in names]
        emit(rows, output, lambda rs: print_table(
            "matching overlays (base.yaml is always applied first)",
            [Column("#"), Column("name", keep=True), Column("file", wrap=True)],
            [[i, r["name"], r["file"]] for i, r in enumerate(rs, 1)]))
        return
    catalog = _load(catalog_dir)
    entries = match(catalog, query_of(given))
    emit([_entry_dict(e) for e in entries], output, _entries_table("matching overlays"))


def _resolve_target(catalog: Catalog, name: str | None, given: dict[str, Any]) -> Recipe:
    criteria = given_criteria(given)
    if (name is None) == (not criteria):
        raise click.UsageError("give a recipe NAME or criteria (--service, --accelerator, ... "
                               "or --criteria FILE), not both")
    return resolve(catalog, recipe_named(catalog, name) if name is not None
                   else query_of(given))


_SHOW_HELP = """Show a fully resolved recipe, by NAME (any unique prefix) or by criteria, with
its evidence status: CONFIRMED (two or more independent trusted signers passed),
SINGLE, CONTESTED (passes and failures), FAILING or UNTESTED, the hardware
tested and the signers.

\b
Evidence comes from the catalog's evidence/<recipe>/ folder and, when a
federation is configured (the context file of `cairn up`, or $CAIRN_NATS_URL),
its `evidence` store; the output names each source read and how many bundles
it gave (an unreachable federation is said, not fatal; --federation makes it
required, --no-federation skips it). A bundle counts when it verifies, its
signer is in --trust, and it attests the recipe as it resolves now.
"""


@recipe.command("show", help=_SHOW_HELP)
@click.argument("name", required=False)
@criteria_options
@_catalog_option
@data_option
@format_option
@click.option("--snapshot", "snapshot_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, metavar="FILE",
              help="With --data: leave out matching overlays whose own constraints this "
                   "snapshot (Cairn's or AICR's) fails; listed as excludedOverlays.")
@click.option("--trust", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Trust list for evidence (default as `cairn evidence verify`).")
@click.option("--federation/--no-federation", default=None,
              help="Count the federation's `evidence` store: required / skipped (default: "
                   "when one is configured, and said when it cannot be reached).")
@output_option(default="yaml")
def show_cmd(name: str | None, catalog_dir: str | None, data_dir: Path | None,
             shape: str | None, snapshot_file: Path | None, trust: Path | None,
             federation: bool | None, output: str, **given: Any) -> None:
    from cairn.cli.evidence import print_recipe_evidence, recipe_evidence_for

    if data_dir is not None:
        if shape == "cairn":
            raise click.UsageError("--data resolves with AICR's rules and prints AICR's "
                                   "RecipeResult: use --format aicr (the default with --data)")
        aicr = load_aicr(data_dir, catalog_dir)
        show_aicr(aicr_result(aicr, name, given_criteria(given), snapshot_file), output)
        return
    if snapshot_file is not None:
        raise click.UsageError("--snapshot excludes overlays of AICR data: give it with --data")
    catalog = _load(catalog_dir)
    resolved = _resolve_target(catalog, name, given)
    if shape == "aicr":
        from cairn.recipes.aicr.convert import result_of

        show_aicr(result_of(resolved), output)
        return
    data = msgspec.to_builtins(resolved)
    data.pop("provenance", None)
    data["evidence"] = recipe_evidence_for(resolved.name, data, catalog.root, trust,
                                           federation)

    def table(shown: dict[str, Any]) -> None:
        _show_table(shown)
        print_recipe_evidence(shown["evidence"])

    emit(data, output, table)


def _show_table(data: dict[str, Any]) -> None:
    click.echo(f"{data['name']}  {data['description']}")
    click.echo("applied: " + " -> ".join(data["applied"]))
    print_table(
        "constraints",
        [Column("name", keep=True), Column("value", wrap=True), Column("severity"),
         Column("optional"), Column("source", wrap=True)],
        [[c["name"], c["value"], c.get("severity", "error"), c.get("optional", False),
          c.get("source", "")] for c in data["constraints"]],
    )
    print_table(
        "components",
        [Column("name", keep=True), Column("version"), Column("chart", wrap=True),
         Column("namespace")],
        [[c["name"], c.get("version", ""), c.get("chart", ""), c.get("namespace", "")]
         for c in data["components"]],
    )
    rows = []
    for phase, body in data["validation"].items():
        rows += [[phase, "check", ch["name"], ch.get("timeout", ""),
                  _short(ch["with"]) if ch.get("with") else ""]
                 for ch in body.get("checks", [])]
        rows += [[phase, "constraint", c["name"], c["value"], c.get("source", "")]
                 for c in body.get("constraints", [])]
    print_table("validation", [Column("phase"), Column("kind"), Column("name", keep=True),
                               Column("value/timeout", wrap=True),
                               Column("with/source", wrap=True)], rows)


recipe.add_command(import_cmd)


@recipe.command("explain", help="Every resolved value with the file that set it; by NAME (any "
                "unique prefix) or by criteria.")
@click.argument("name", required=False)
@criteria_options
@_catalog_option
@output_option()
def explain_cmd(name: str | None, catalog_dir: str | None, output: str, **given: Any) -> None:
    resolved = _resolve_target(_load(catalog_dir), name, given)
    rows = [
        {"path": ".".join(p.path), "value": p.value, "file": p.file} for p in resolved.provenance
    ]
    emit(
        {"name": resolved.name, "applied": resolved.applied, "values": rows},
        output,
        lambda d: print_table(
            f"{d['name']} (applied: {' -> '.join(d['applied'])})",
            [Column("path", keep=True), Column("value", wrap=True), Column("file", wrap=True)],
            [[r["path"], _short(r["value"]), r["file"]] for r in d["values"]],
        ),
    )


def _short(value: Any) -> str:
    """A value for a table cell: flow YAML (the cell wraps; -o json has it whole)."""
    return value if isinstance(value, str) else yaml.safe_dump(
        value, default_flow_style=True, width=4096).strip()


@recipe.command(
    "query", help="One resolved value by dotted PATH, e.g. components.gpu-operator.version, "
                  "of recipe NAME (any unique prefix) or of the recipe the criteria select "
                  "(then PATH alone)."
)
@click.argument("words", nargs=-1, required=True, metavar="[NAME] PATH")
@criteria_options
@_catalog_option
@output_option()
def query_cmd(words: tuple[str, ...], catalog_dir: str | None, output: str,
              **given: Any) -> None:
    if len(words) > 2 or (len(words) == 2) == bool(given_criteria(given)):
        raise click.UsageError("give NAME PATH, or criteria and PATH")
    *name, path = words
    target = _resolve_target(_load(catalog_dir), name[0] if name else None, given)
    value = query_value(target, path)
    emit(
        value,
        output,
        lambda v: click.echo(
            v if isinstance(v, str | int | float) else yaml.safe_dump(v, sort_keys=False).rstrip()
        ),
    )


LINT_HELP = """Report what loads but can never hold: constraints on a reading that no
snapshot collector and no check produces (naming recipe, file, line and reading);
with criteria, only in the overlays whose own criteria are those given.

\b
Exit 0 when nothing is found, 1 when something is, 3 when the catalog does not load."""


@recipe.command("lint", help=LINT_HELP)
@criteria_options
@_catalog_option
@output_option()
def lint_cmd(catalog_dir: str | None, output: str, **given: Any) -> None:
    from cairn.recipes.lint import lint_catalog

    catalog = _load(catalog_dir)
    found = lint_catalog(catalog)
    if given_criteria(given):
        wanted = _exact_filter(catalog, given_criteria(given))
        found = [f for f in found if f.recipe in catalog.overlays
                 and wanted(catalog.overlays[f.recipe].spec.criteria)]
    # One line per finding, as compilers print them: file:line: field: problem.
    emit([vars(f) for f in found], output,
         lambda _: click.echo("\n".join(map(str, found)) or "no findings"))
    if found:
        raise SystemExit(1)
