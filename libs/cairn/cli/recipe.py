"""`cairn recipe`: list, match, show, explain and query recipes. Parsing and printing only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import msgspec
import yaml

from cairn.cli.output import emit, output_option, print_table
from cairn.errors import InvalidInput
from cairn.recipes import (
    Catalog,
    Criteria,
    Recipe,
    load_catalog,
    match,
    parse_assignments,
    query_value,
    resolve,
    specificity,
)
from cairn.recipes.catalog import ENV_CATALOG, RecipeEntry
from cairn.recipes.model import CRITERIA_FIELDS

_CRITERIA_HELP = "Filter or select by criteria, KEY=VALUE (repeatable), e.g. service=eks."


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
        print_table(title, ["#", "name", "kind", "criteria (not any)", "base"], table)

    return show


@click.group(help="List, match, show and explain recipes (what a site should be).")
def recipe() -> None:
    pass


@recipe.command("list", help="List the catalog's overlays (and mixins with --mixins).")
@click.option("--criteria", "pairs", multiple=True, metavar="KEY=VALUE", help=_CRITERIA_HELP)
@click.option("--mixins", is_flag=True, help="Include mixins.")
@_catalog_option
@output_option()
def list_cmd(pairs: tuple[str, ...], mixins: bool, catalog_dir: str | None, output: str) -> None:
    catalog = _load(catalog_dir)
    wanted = _exact_filter(catalog, pairs)
    entries = [e for e in catalog.overlays.values() if wanted(e.spec.criteria)]
    if mixins and not pairs:
        entries += list(catalog.mixins.values())
    emit([_entry_dict(e) for e in entries], output, _entries_table("recipes"))


def _exact_filter(catalog: Catalog, pairs: tuple[str, ...]) -> Callable[[Criteria], bool]:
    raw = parse_assignments(pairs)
    given = {p.partition("=")[0].strip() for p in pairs}
    want = {
        f: catalog.criteria.value(f, getattr(raw, f), where=f"criteria.{f}")
        for f in CRITERIA_FIELDS
        if f in given
    }
    nodes = raw.nodes if "nodes" in given else None
    return lambda c: (
        all(getattr(c, f) == v for f, v in want.items()) and (nodes is None or c.nodes == nodes)
    )


def _query_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for field in reversed((*CRITERIA_FIELDS, "nodes")):
        kind: Any = int if field == "nodes" else str
        func = click.option(
            f"--{field}",
            field,
            type=kind,
            default=None,
            help="Node count (0 = any)." if field == "nodes" else f"Query {field} (default: any).",
        )(func)
    return func


def _query(values: dict[str, Any]) -> Criteria:
    given = {k: v for k, v in values.items() if v is not None}
    return msgspec.convert(given, Criteria)


@recipe.command("match", help="Overlays that apply to a query, in the order they are applied.")
@_query_options
@_catalog_option
@output_option()
def match_cmd(catalog_dir: str | None, output: str, **values: Any) -> None:
    catalog = _load(catalog_dir)
    entries = match(catalog, _query(values))
    emit([_entry_dict(e) for e in entries], output, _entries_table("matching overlays"))


def _resolve_target(catalog: Catalog, name: str | None, pairs: tuple[str, ...]) -> Recipe:
    if (name is None) == (not pairs):
        raise InvalidInput(
            "give a recipe NAME or --criteria KEY=VALUE..., not both", field="recipe"
        )
    return resolve(catalog, name if name is not None else parse_assignments(pairs))


_SHOW_HELP = """Show a fully resolved recipe, by NAME or by --criteria, with its evidence status:
CONFIRMED (two or more independent trusted signers passed), SINGLE, CONTESTED
(passes and failures), FAILING or UNTESTED, the hardware tested and the signers.
Evidence comes from the catalog's evidence/<recipe>/ folder and, with
--federation, the federation's `evidence` store; a bundle counts when it
verifies, its signer is in --trust, and it attests the recipe as it resolves now.
"""


@recipe.command("show", help=_SHOW_HELP)
@click.argument("name", required=False)
@click.option("--criteria", "pairs", multiple=True, metavar="KEY=VALUE", help=_CRITERIA_HELP)
@_catalog_option
@click.option("--trust", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Trust list for evidence (default as `cairn evidence verify`).")
@click.option("--federation", is_flag=True, default=False,
              help="Also count evidence from the federation's `evidence` store.")
@output_option(default="yaml")
def show_cmd(
    name: str | None, pairs: tuple[str, ...], catalog_dir: str | None, trust: Path | None,
    federation: bool, output: str
) -> None:
    from cairn.cli.evidence import print_recipe_evidence, recipe_evidence_for

    catalog = _load(catalog_dir)
    resolved = _resolve_target(catalog, name, pairs)
    data = msgspec.to_builtins(resolved)
    data.pop("provenance", None)
    data["evidence"] = recipe_evidence_for(resolved.name, data, catalog.root, trust,
                                           federation).to_dict()

    def table(shown: dict[str, Any]) -> None:
        _show_table(shown)
        print_recipe_evidence(shown["evidence"])

    emit(data, output, table)


def _show_table(data: dict[str, Any]) -> None:
    from rich.console import Console

    Console().print(f"[bold]{data['name']}[/bold]  {data['description']}")
    Console().print("applied: " + " -> ".join(data["applied"]))
    print_table(
        "constraints",
        ["name", "value", "severity", "optional", "source"],
        [
            [
                c["name"],
                c["value"],
                c.get("severity", "error"),
                c.get("optional", False),
                c.get("source", ""),
            ]
            for c in data["constraints"]
        ],
    )
    print_table(
        "components",
        ["name", "version", "chart", "namespace"],
        [
            [c["name"], c.get("version", ""), c.get("chart", ""), c.get("namespace", "")]
            for c in data["components"]
        ],
    )
    rows = []
    for phase, body in data["validation"].items():
        rows += [
            [
                phase,
                "check",
                ch["name"],
                ch.get("timeout", ""),
                yaml.safe_dump(ch.get("with") or {}, default_flow_style=True).strip()
                if ch.get("with")
                else "",
            ]
            for ch in body.get("checks", [])
        ]
        rows += [
            [phase, "constraint", c["name"], c["value"], c.get("source", "")]
            for c in body.get("constraints", [])
        ]
    print_table("validation", ["phase", "kind", "name", "value/timeout", "with/source"], rows)


@recipe.command("explain", help="Every resolved value with the file that set it.")
@click.argument("name", required=False)
@click.option("--criteria", "pairs", multiple=True, metavar="KEY=VALUE", help=_CRITERIA_HELP)
@_catalog_option
@output_option()
def explain_cmd(
    name: str | None, pairs: tuple[str, ...], catalog_dir: str | None, output: str
) -> None:
    resolved = _resolve_target(_load(catalog_dir), name, pairs)
    rows = [
        {"path": ".".join(p.path), "value": p.value, "file": p.file} for p in resolved.provenance
    ]
    emit(
        {"name": resolved.name, "applied": resolved.applied, "values": rows},
        output,
        lambda d: print_table(
            f"{d['name']} (applied: {' -> '.join(d['applied'])})",
            ["path", "value", "file"],
            [[r["path"], _short(r["value"]), r["file"]] for r in d["values"]],
        ),
    )


def _short(value: Any) -> str:
    text = (
        value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
    )
    return text if len(text) <= 80 else text[:77] + "..."


@recipe.command(
    "query", help="One resolved value by dotted PATH, e.g. components.gpu-operator.version."
)
@click.argument("name")
@click.argument("path")
@_catalog_option
@output_option()
def query_cmd(name: str, path: str, catalog_dir: str | None, output: str) -> None:
    value = query_value(resolve(_load(catalog_dir), name), path)
    emit(
        value,
        output,
        lambda v: click.echo(
            v if isinstance(v, str | int | float) else yaml.safe_dump(v, sort_keys=False).rstrip()
        ),
    )


LINT_HELP = """Report what loads but can never hold: constraints on a reading that no
snapshot collector and no check produces (naming recipe, file, line and reading).

\b
Exit 0 when nothing is found, 1 when something is, 3 when the catalog does not load."""


@recipe.command("lint", help=LINT_HELP)
@_catalog_option
@output_option()
def lint_cmd(catalog_dir: str | None, output: str) -> None:
    from cairn.recipes.lint import lint_catalog

    found = lint_catalog(_load(catalog_dir))
    # One line per finding, as compilers print them: file:line: field: problem.
    emit([vars(f) for f in found], output,
         lambda _: click.echo("\n".join(map(str, found)) or "no findings"))
    if found:
        raise SystemExit(1)
