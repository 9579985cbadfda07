"""`cairn bundle`: render a recipe as a deployment bundle; explain, diff and verify bundles.

Parsing and printing only; the work is in `cairn.bundles`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click
import msgspec
import yaml

from cairn.bundles import (
    DEPLOYERS,
    Deployer,
    GitTarget,
    diff_bundles,
    diff_markdown,
    plan_bundle,
    read_manifest,
    read_provenance,
    render_files,
    verify,
    write_bundle,
)
from cairn.bundles.attestation import check_attestation
from cairn.bundles.checksums import inventory
from cairn.bundles.k0rdent_target import parse_selector
from cairn.bundles.model import CHECKSUMS_FILE
from cairn.cli.output import Column, emit, output_option, print_table
from cairn.cli.recipe import recipe_named
from cairn.errors import NotFound, Unverified
from cairn.evidence.keys import load_public_key, load_signing_key
from cairn.recipes import load_catalog
from cairn.recipes.catalog import ENV_CATALOG

_BUNDLE_HELP = """Render a recipe as a deployment bundle, or explain, diff and verify bundles.

\b
  cairn bundle --recipe h100-eks-ubuntu-training --deployer helm --out out/
  cairn bundle --recipe R --deployer argocd --repo-url URL --repo-path clusters/a --out out/
  cairn bundle --recipe R --deployer pulumi --out infra/gpu/
  cairn bundle --recipe R --deployer k0rdent --upgrade-from k0rdent-old/ --out k0rdent/
  cairn bundle --from recipe.yaml --data ./aicr-data --deployer helm --out out/

--from FILE renders a recipe file instead of a catalog recipe: AICR's
RecipeResult (`aicr recipe`, `cairn recipe show --format aicr`) or Cairn's
resolved recipe (`cairn recipe show -o yaml`); --data DIR is the AICR data
directory its values files and manifests come from. An AICR recipe with the
helm deployer is written in AICR's layout (README.md, deploy.sh, undeploy.sh,
recipe.yaml, checksums.txt, <component>/values.yaml and manifests/).

Values: the recipe's, then each --values file, then each --set (later wins).
--recipe takes any unique prefix of a recipe's name. --out is the directory;
-o, as on every command, the output format of what is printed.
Exit codes: 0 ok; 9 verify found a difference or a bad signature; 2 usage
error (e.g. -o DIR); 3 invalid input; 4 not found; 5 a private key file others
can read; 6 the output directory exists (use --force to replace a bundle).
"""


@click.group(help=_BUNDLE_HELP, invoke_without_command=True)
@click.option("--recipe", "recipe_name", metavar="NAME",
              help="Recipe to render (an overlay; any unique prefix of its name).")
@click.option("--from", "from_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, metavar="FILE",
              help="Render this recipe file (a RecipeResult, or Cairn's resolved recipe) "
                   "instead of --recipe.")
@click.option("--data", "data_dir", type=click.Path(path_type=Path), default=None,
              metavar="DIR", help="With --from: the AICR data directory holding the values "
                                  "files and manifests the recipe names.")
@click.option("--deployer", type=click.Choice(DEPLOYERS), default="helm", show_default=True,
              help="Tool the bundle is written for.")
@click.option("--out", "out", type=click.Path(file_okay=False), metavar="DIR",
              help="Directory to write the bundle to (must not exist, or be empty).")
@click.option("--values", "overrides", multiple=True, type=click.Path(dir_okay=False),
              metavar="FILE",
              help="Override file: a mapping of component name to values (repeatable).")
@click.option("--set", "sets", multiple=True, metavar="COMPONENT.KEY=VALUE",
              help="Set one value, e.g. gpu-operator.driver.version=580.105.08 (repeatable).")
@click.option("--repo-url", default="", metavar="URL",
              help="Git repository the bundle is committed to (argocd: required).")
@click.option("--repo-path", default=".", show_default=True, metavar="PATH",
              help="The bundle's folder inside that repository (argocd, flux).")
@click.option("--revision", default="HEAD", show_default=True,
              help="Git revision Argo CD's app-of-apps follows.")
@click.option("--cluster-selector", "cluster_selector", multiple=True, metavar="KEY=VALUE",
              help="k0rdent: a label the clusters must carry (repeatable); replaces the "
                   "labels derived from the recipe's criteria (cairn.dev/<field>=<value>).")
@click.option("--upgrade-from", "upgrade_from", type=click.Path(file_okay=False),
              metavar="DIR",
              help="k0rdent: the bundle the clusters run now; each ServiceTemplateChain lets "
                   "k0rdent upgrade its service from that bundle's template.")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY",
              help="Sign the bundle with this Ed25519 private key file (cairn keys create): "
                   "writes attestation.dsse.json.")
@click.option("--force", is_flag=True, help="Replace an existing bundle in DIR.")
@click.option("--catalog", "catalog_dir", type=click.Path(file_okay=False), envvar=ENV_CATALOG,
              default=None,
              help=f"Recipe catalog directory (default: the repository's recipes/; "
                   f"${ENV_CATALOG}).")
@output_option(help="Output format of the summary printed (the bundle goes to --out DIR).")
@click.pass_context
def bundle(ctx: click.Context, recipe_name: str | None, from_file: Path | None,
           data_dir: Path | None, deployer: str, out: str | None,
           overrides: tuple[str, ...], sets: tuple[str, ...], repo_url: str, repo_path: str,
           revision: str, cluster_selector: tuple[str, ...], upgrade_from: str | None,
           sign_key: str | None, force: bool, catalog_dir: str | None,
           output: str) -> None:
    if ctx.invoked_subcommand is not None:
        if recipe_name or out or from_file:
            raise click.UsageError("--recipe/--from and --out render a bundle; give them "
                                   "without a subcommand")
        return
    if recipe_name and from_file:
        raise click.UsageError("give --recipe NAME or --from FILE, not both")
    if data_dir is not None and from_file is None:
        raise click.UsageError("--data names where a --from FILE's values files are")
    if not (recipe_name or from_file) or not out:
        if not (recipe_name or from_file) and not out:
            click.echo(ctx.get_help())
            return
        raise click.UsageError("rendering needs --recipe NAME (or --from FILE) and --out DIR "
                               "(-o is the output format: table, json or yaml)")
    if (cluster_selector or upgrade_from) and deployer != "k0rdent":
        raise click.UsageError("--cluster-selector and --upgrade-from are for --deployer "
                               "k0rdent")
    selector = parse_selector(cluster_selector) if cluster_selector else None
    previous = read_manifest(Path(upgrade_from)) if upgrade_from else None
    key = load_signing_key(Path(sign_key)) if sign_key else None
    git = GitTarget(repo_url=repo_url, path=repo_path, revision=revision)
    if from_file is not None:
        from cairn.cli.bundlefrom import render_from_file

        plan, files = render_from_file(from_file, data_dir, cast(Deployer, deployer),
                                       overrides, sets, git, key, cluster_selector=selector,
                                       upgrade_from=previous)
    else:
        assert recipe_name is not None
        catalog = load_catalog(Path(catalog_dir) if catalog_dir else None)
        recipe_name = recipe_named(catalog, recipe_name)
        plan = plan_bundle(catalog, recipe_name, cast(Deployer, deployer), overrides, sets,
                           cluster_selector=selector, upgrade_from=previous)
        files = render_files(plan, git, sign_with=key)
    write_bundle(files, Path(out), force=force)
    data = {"out": out, "recipe": plan.manifest.recipe, "deployer": deployer,
            "components": len(plan.manifest.components), "files": sorted(files)}
    emit(data, output, lambda d: click.echo(
        f"wrote {len(d['files'])} files for {d['components']} components "
        f"({d['recipe']}, {deployer}) to {out}"))


@bundle.command("verify", help="Check a bundle against its checksums.txt and, when signed, "
                "its attestation: exit 0 when every file matches and none was added or "
                "removed, 9 (does not verify) otherwise, naming each file.")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--key", "key_files", multiple=True, type=click.Path(dir_okay=False),
              metavar="PUB",
              help="Public key that must have signed the bundle (repeatable: any one).")
@output_option()
def verify_cmd(directory: str, key_files: tuple[str, ...], output: str) -> None:
    root = Path(directory)
    result = verify(root)
    keys = {k.key_id: k for k in (load_public_key(Path(f)) for f in key_files)}
    present, _ = inventory(root)
    present[CHECKSUMS_FILE] = root / CHECKSUMS_FILE
    signed = check_attestation(root, present, keys)
    ok = result.ok and not signed.problems
    data = {"bundle": directory, "ok": ok, "checked": result.checked,
            "added": result.added, "removed": result.removed, "changed": result.changed,
            "signed": signed.present, "signed_by": signed.key_ids,
            "verified_by": signed.verified_by, "attestation_problems": signed.problems}

    def show(d: dict[str, Any]) -> None:
        for kind in ("added", "removed", "changed"):
            for path in d[kind]:
                click.echo(f"{kind}: {path}")
        for problem in d["attestation_problems"]:
            click.echo(f"attestation: {problem}")
        if d["signed"]:
            how = ("verified with key " + ", ".join(d["verified_by"]) if d["verified_by"]
                   else "signature not checked (give --key)" if not key_files else "")
            click.echo(f"signed by {', '.join(d['signed_by'])}" + (f"; {how}" if how else ""))
        click.echo(f"{'ok' if d['ok'] else 'FAILED'}: {d['checked']} files listed in "
                   f"{directory}/checksums.txt")

    emit(data, output, show)
    if not ok:
        raise Unverified(f"{directory} does not verify: "
                         + ("attestation: " + "; ".join(signed.problems) if signed.problems
                            else f"{len(result.added) + len(result.removed) + len(result.changed)}"
                                 " file(s) differ from checksums.txt"))


def _short(value: Any) -> str:
    """A value for a table cell: flow YAML (the cell wraps; -o json has it whole)."""
    return value if isinstance(value, str) else yaml.safe_dump(
        value, default_flow_style=True, width=4096).strip()


@bundle.command("explain", help="Every value in a bundle with the layer that set it "
                "(base, overlay, mixin, override, set) and its file.")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--component", "components", multiple=True, metavar="NAME",
              help="Only this component (repeatable).")
@output_option()
def explain_cmd(directory: str, components: tuple[str, ...], output: str) -> None:
    provenance = read_provenance(Path(directory))
    rows = [msgspec.to_builtins(v) for v in provenance.values
            if not components or v.component in components]
    known = {v.component for v in provenance.values}
    missing = [c for c in components if c not in known]
    if missing:
        raise NotFound(f"no component {missing[0]!r} in the bundle", file=directory,
                       field="component")
    emit({"recipe": provenance.recipe, "values": rows}, output, lambda d: print_table(
        f"{d['recipe']}: where each value came from",
        [Column("component", keep=True), Column("path", keep=True), Column("value", wrap=True),
         Column("layer"), Column("source", wrap=True)],
        [[r["component"], r["path"], _short(r["value"]), r["layer"], _short(r["source"])]
         for r in d["values"]]))


@bundle.command("diff", help="What changes from bundle OLD to bundle NEW: components added "
                "and removed, chart versions and values changed (Markdown, or -o json|yaml).")
@click.argument("old", type=click.Path(file_okay=False))
@click.argument("new", type=click.Path(file_okay=False))
@output_option()
def diff_cmd(old: str, new: str, output: str) -> None:
    before, after = read_manifest(Path(old)), read_manifest(Path(new))
    result = diff_bundles(before, after)
    emit(result, output, lambda _: click.echo(diff_markdown(result, before, after), nl=False))
