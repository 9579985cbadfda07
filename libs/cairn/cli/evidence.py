"""`cairn evidence verify|status|submit`: check signed evidence offline, see which sites it
makes eligible, hand in a bundle validated elsewhere."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import msgspec

from cairn.cli.output import Column, emit, output_option, print_table
from cairn.cli.session import run, session_options, with_client
from cairn.client import Client
from cairn.client.prefix import resolve_job
from cairn.errors import CairnError, InvalidInput, NotFound, Timeout, Unavailable, Unverified
from cairn.events import JobSubmitted
from cairn.evidence.bundle import BundleFiles, pack, read_bundle
from cairn.evidence.dashboard import EVIDENCE_DIR, catalog_bundles, recipe_evidence
from cairn.evidence.eligibility import Eligibility
from cairn.evidence.trust import TrustList, load_trust
from cairn.evidence.verify import Verification, verify_bundle
from cairn.names import check_name
from cairn.runtime import context as context_file
from cairn.spec.duration import parse_duration

DEFAULT_MAX_AGE = "7d"
SUBMIT_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0


@asynccontextmanager
async def connected() -> AsyncIterator[Client]:
    """A client session of the context file (or $CAIRN_NATS_URL), bounded in time."""
    async with await Client.connect() as client:
        yield client


@click.group(help="Verify signed evidence, show eligibility, submit bundles.")
def evidence() -> None:
    pass


def default_trust_file() -> Path:
    """$CAIRN_TRUST, else trust.yaml beside the context's federation (`cairn up`), else
    .cairn/trust.yaml."""
    if os.environ.get("CAIRN_TRUST"):
        return Path(os.environ["CAIRN_TRUST"])
    try:
        ctx = context_file.load()
    except CairnError:
        ctx = None
    if ctx is not None and ctx.dir:
        return Path(ctx.dir) / "trust.yaml"
    return Path(".cairn") / "trust.yaml"


def trust_options(func: Any) -> Any:
    func = click.option("--revoked", type=click.Path(dir_okay=False, path_type=Path),
                        default=None, help="A revocation list (keys whose signatures no "
                        "longer count).")(func)
    return click.option("--trust", type=click.Path(dir_okay=False, path_type=Path),
                        default=None, help="The trust list (default: $CAIRN_TRUST, else the "
                        "trust.yaml of `cairn up`, else .cairn/trust.yaml).")(func)


def load_trust_option(trust: Path | None, revoked: Path | None) -> TrustList:
    path = trust or default_trust_file()
    if not path.exists():
        raise NotFound(f"no trust list at {path}: pass --trust FILE or set $CAIRN_TRUST",
                       file=str(path))
    return load_trust(path, revoked)


def max_age_of(text: str) -> timedelta | None:
    if text in ("any", "none"):
        return None
    try:
        return timedelta(seconds=parse_duration(text))
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field="--max-age") from None


VERIFY_HELP = """Verify an evidence bundle offline: BUNDLE is a directory or a tarball, or
--site S --recipe R fetches the latest from the federation's `evidence` store
(only the fetch uses the network).

\b
Checks: a trusted, unrevoked signature (--trust, --revoked; --signer limits
whose count); every file digest in manifest.json and no file outside it; the
statement's signed digests; the recipe digest recomputed from the bundled
recipe; the constraints re-run against the bundled snapshot; freshness
(--max-age, default 7d; `any` to skip). `-o json` names every check.

\b
Exit codes: 0 valid and the validation passed; 1 valid but the validation
failed; 9 invalid: forged, tampered, untrusted or revoked signer, stale (which
check, and why, is printed); 2 usage error; 3 unreadable bundle or trust list;
4 no such bundle or no evidence for --site/--recipe.
"""


@evidence.command("verify", help=VERIFY_HELP,
                  short_help="Verify an evidence bundle offline.")
@click.argument("bundle", required=False, type=click.Path(path_type=Path))
@click.option("--site", default=None, help="Fetch the latest evidence of this site...")
@click.option("--recipe", default=None, help="...for this recipe.")
@click.option("--max-age", default=DEFAULT_MAX_AGE, show_default=True,
              help="Oldest acceptable validation (e.g. 12h, 7d; `any`).")
@click.option("--signer", "signers", multiple=True,
              help="Accept only this signer name or role (repeatable).")
@trust_options
@output_option()
def verify(bundle: Path | None, site: str | None, recipe: str | None, max_age: str,
           signers: tuple[str, ...], trust: Path | None, revoked: Path | None,
           output: str) -> None:
    trust_list = load_trust_option(trust, revoked)
    age = max_age_of(max_age)
    if bundle is not None:
        if site or recipe:
            raise click.UsageError("give BUNDLE or --site/--recipe, not both")
        files = read_bundle(bundle)
    elif site and recipe:
        files = run(_fetch_latest(check_name(site, "site"), check_name(recipe, "recipe")))
    else:
        raise click.UsageError("give BUNDLE, or --site and --recipe")
    result = verify_bundle(files, trust_list, now=datetime.now(UTC), max_age=age,
                           accepted_signers=signers)
    emit(result.to_dict(), output, lambda _: _print_verification(result))
    raise SystemExit(result.exit_code)


async def _fetch_latest(site: str, recipe: str) -> BundleFiles:
    async with connected() as client:
        return await client.evidence.latest(site, recipe)


def _print_verification(result: Verification) -> None:
    rows = [(c.name, "ok" if c.passed else "FAILED", c.reason, c.message) for c in result.checks]
    print_table(None, (Column("check", keep=True), Column("outcome"), Column("reason"),
                       Column("detail", wrap=True)), rows)
    verdict = {0: "valid, validation passed", 1: "valid, validation FAILED",
               Unverified.exit_code: "INVALID"}[result.exit_code]
    click.echo(verdict)


STATUS_HELP = """Per site and recipe: eligible or not, why, since when, until when.

\b
A site is eligible for a recipe while its newest valid evidence passed, is
signed by a trusted key, is younger than --max-age, and the site's latest
snapshot still satisfies the recipe's constraints (a drift that breaks one
demotes the site, naming the constraint, until a new validation).
Reasons: eligible, no-evidence, invalid-evidence, untrusted-signer,
failed-validation, expired, drifted.

\b
Exit codes: 0 shown; 3 bad trust list or --max-age; 4 no trust list;
7 the bus cannot be reached.
"""


@evidence.command("status", help=STATUS_HELP,
                  short_help="Eligibility per site and recipe: why, since, until.")
@click.option("--site", default=None, help="Only this site.")
@click.option("--recipe", default=None, help="Only this recipe.")
@click.option("--max-age", default=DEFAULT_MAX_AGE, show_default=True,
              help="Oldest acceptable validation (e.g. 12h, 7d; `any`).")
@trust_options
@output_option()
def status(site: str | None, recipe: str | None, max_age: str, trust: Path | None,
           revoked: Path | None, output: str) -> None:
    trust_list = load_trust_option(trust, revoked)
    age = max_age_of(max_age)
    site = check_name(site, "site") if site else None
    recipe = check_name(recipe, "recipe") if recipe else None

    async def body() -> list[Eligibility]:
        async with connected() as client:
            return await client.evidence.eligibility(trust_list, now=datetime.now(UTC),
                                     max_age=age, site=site, recipe=recipe)

    verdicts = run(body())
    emit([v.to_dict() for v in verdicts], output, _print_status)


def _print_status(rows: list[dict[str, Any]]) -> None:
    print_table(None, (Column("site", keep=True), Column("recipe", keep=True),
                       Column("eligible"), Column("reason"), Column("since"), Column("until"),
                       Column("detail", wrap=True)),
                [(r["site"], r["recipe"], "yes" if r["eligible"] else "no", r["reason"],
                  _short(r["since"]), _short(r["until"]), r["message"]) for r in rows])


def _short(stamp: str | None) -> str:
    return stamp[:19].replace("T", " ") if stamp else "-"


SUBMIT_HELP = """Submit BUNDLE (directory or tarball), validated on your own hardware, to the
federation's signer. The signer checks its integrity (digests, signed files,
recipe digest, constraints re-run) and stores it in the `evidence` store; it
counts for a recipe's evidence status only when its signer is trusted.

\b
Exit codes: 0 stored; 9 the bundle does not verify: a digest, signed file or
recipe digest is wrong (the reason is printed); 3 it cannot be read; 7 no
signer answers.
"""


@evidence.command("submit", help=SUBMIT_HELP,
                  short_help="Submit a bundle validated on your own hardware.")
@click.argument("bundle", type=click.Path(exists=True, path_type=Path))
@output_option()
def submit(bundle: Path, output: str) -> None:
    packed = pack(read_bundle(bundle))

    async def body() -> dict[str, Any]:
        async with connected() as client:
            accepted = await client.evidence.submit(packed)
        return msgspec.to_builtins(accepted)  # type: ignore[no-any-return]

    answer = run(body())
    emit(answer, output, lambda a: click.echo(
        f"stored {a['bundle']} ({a['site']} / {a['recipe']}: {a['result']}); "
        f"{'trusted' if a['trusted'] else 'not trusted here'}: {a['signature']}"))


def recipe_evidence_for(recipe: str, resolved: dict[str, Any], catalog_root: Path | None,
                        trust: Path | None, federation: bool | None) -> dict[str, Any]:
    """`cairn recipe show`'s evidence section: bundles in the catalog's evidence folder and
    those in the federation's `evidence` store, with the sources it read (`sources`).

    `federation`: True reads the store (an unreachable bus is an error), False does not, None
    reads it when a federation is configured (context file or $CAIRN_NATS_URL) and says so
    when it cannot be reached."""
    path = trust or default_trust_file()
    trust_list = load_trust(path) if path.exists() else TrustList()
    bundles = catalog_bundles(catalog_root, recipe)
    folder = (catalog_root / EVIDENCE_DIR / recipe) if catalog_root else None
    sources: list[dict[str, Any]] = [{"source": "catalog", "where": str(folder or "-"),
                                      "bundles": len(bundles)}]
    if federation is None:
        federation = context_file.load(required=False) is not None
        required = False
    else:
        required = federation
    if federation:
        ctx = context_file.load()
        assert ctx is not None
        try:
            found = run(_federation_bundles(recipe))
        except (Unavailable, Timeout) as exc:
            if required:
                raise
            sources.append({"source": "federation", "where": ctx.nats_url, "bundles": 0,
                            "error": str(exc)})
        else:
            bundles += found
            sources.append({"source": "federation", "where": ctx.nats_url,
                            "bundles": len(found)})
    shown = recipe_evidence(recipe, resolved, bundles, trust_list, now=datetime.now(UTC))
    return {**shown.to_dict(), "trust": str(path) if path.exists() else None,
            "sources": sources}


async def _federation_bundles(recipe: str) -> list[tuple[str, BundleFiles]]:
    async with connected() as client:
        return await client.evidence.bundles(recipe)


def print_recipe_evidence(found: dict[str, Any]) -> None:
    read = "; ".join(
        f"{src['source']} {src['where']} ({src['bundles']} bundle"
        f"{'' if src['bundles'] == 1 else 's'})"
        + (f": not reachable: {src['error']}" if src.get("error") else "")
        for src in found["sources"])
    click.echo(f"evidence sources: {read}; trust list: {found['trust'] or 'none'}")
    click.echo(f"evidence: {found['state']}"
               + (f" (signers: {', '.join(found['signers'])})" if found["signers"] else ""))
    if found["hardware"]:
        click.echo("tested on: " + "; ".join(found["hardware"]))
    rows = [(a["site"], ", ".join(a["signers"]) or "-", a["result"],
             _short(a["validated_at"]), "yes" if a["counted"] else f"no: {a['why_not']}",
             a["source"]) for a in found["attestations"]]
    if rows:
        print_table(None, (Column("site", keep=True), Column("signers", wrap=True),
                           Column("result"), Column("validated"), Column("counted", wrap=True),
                           Column("source", wrap=True)), rows)


RECEIPTS_HELP = """The signed receipts of JOB's gated dispatches: per site, which evidence the
coordinator checked before trusting the site with the job, verified against the
trust list (the coordinator's key must be in it). Roles on the hub are not gated
(the hub is the federation's own) and are listed as `not-gated`. JOB may be any
unique prefix of the job id.

\b
Exit codes: 0 every gated dispatch has a receipt that verifies; 9 one is
missing or does not verify; 3 bad name or trust list; 4 no such job or no
trust list; 7 the bus cannot be reached.
"""


@evidence.command("receipts", help=RECEIPTS_HELP,
                  short_help="Verify a job's dispatch receipts.")
@click.argument("job")
@trust_options
@session_options
@output_option()
def receipts(job: str, trust: Path | None, revoked: Path | None, study: str | None,
             actor: str | None, output: str) -> None:
    from cairn.evidence.receipts import receipts_hold

    trust_list = load_trust_option(trust, revoked)

    async def body(c: Client) -> tuple[str, JobSubmitted | None, list[dict[str, Any]]]:
        whole = await resolve_job(c, job)
        submitted, rows = await c.evidence.receipts(c.study, whole, trust_list)
        return c.study, submitted, rows

    in_study, submitted, rows = with_client(study, actor, body)
    if submitted is None and not rows:
        raise NotFound(f"no job {job} in study {in_study}", field="job")
    emit(rows, output, lambda shown: _print_receipts(shown, submitted))
    if not rows:
        raise NotFound(f"job {job} has no dispatches yet in study {in_study}", field="job")
    if not receipts_hold(rows):
        bad = [f"{r['site']} {r['role']}/{r['rank']}: {r['status']}" for r in rows
               if r["status"] not in ("verified", "not-gated")]
        raise Unverified("dispatch receipts do not hold: " + "; ".join(bad))


def _print_receipts(rows: list[dict[str, Any]], submitted: JobSubmitted | None) -> None:
    if submitted is not None and submitted.requires is None:
        click.echo(f"job {submitted.job} requires no recipe: none of its dispatches is gated")
    print_table(None, (Column("site", keep=True), Column("role", keep=True), Column("rank"),
                       Column("receipt"), Column("by"), Column("evidence"),
                       Column("verified at"), Column("detail", wrap=True)),
                [(r["site"], r["role"], r["rank"], r["status"], r["by"] or "-",
                  r["evidence"] or "-", _short(r["verified_at"]), r["detail"]) for r in rows])
