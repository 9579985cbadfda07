"""`cairn api`: what a program needs to use the HTTP API: its URL, a short-lived bearer
token minted from your own credential, and a signed request to send through it."""

from __future__ import annotations

import os
import sys

import click

from cairn import api as api_types
from cairn.errors import InvalidInput, Unavailable
from cairn.runtime import context as context_file
from cairn.trust import apitoken


def _context() -> context_file.Context:
    ctx = context_file.load()
    assert ctx is not None  # load() raises instead
    return ctx


def _creds(given: str | None) -> str:
    creds = given or os.environ.get("CAIRN_CREDS") or _context().creds
    if not creds:
        raise InvalidInput("no credential: this federation is insecure (`cairn up "
                           "--insecure`), where the API needs no token; otherwise pass "
                           "--creds or set CAIRN_CREDS", field="creds")
    return creds


@click.group(help="The HTTP API (docs/api.md): its URL, tokens, signed requests.")
def api() -> None:
    pass


@api.command("url", help="Print the HTTP API's URL (from the context file of `cairn up`).")
def url_cmd() -> None:
    found = os.environ.get("CAIRN_API_URL") or _context().api_url
    if not found:
        raise Unavailable("no HTTP API in this context: start the federation with `cairn up` "
                          "(the `api` extra installed), or set CAIRN_API_URL")
    click.echo(found)


@api.command("token", help=f"""Print a bearer token for the HTTP API, minted from your own
credential (the context file's `creds`, $CAIRN_CREDS or --creds) and valid for --lifetime
seconds (at most {apitoken.MAX_LIFETIME_S}). It reads exactly what your credential may read
on the bus, no more; send it as `Authorization: Bearer <token>`.""")
@click.option("--creds", type=click.Path(dir_okay=False), default=None,
              help="Credentials file (default: $CAIRN_CREDS, else the context file).")
@click.option("--lifetime", type=click.IntRange(1, apitoken.MAX_LIFETIME_S),
              default=apitoken.DEFAULT_LIFETIME_S, show_default=True,
              help="Seconds the token is valid.")
def token_cmd(creds: str | None, lifetime: int) -> None:
    click.echo(apitoken.mint_from_creds(_creds(creds), lifetime_s=lifetime))


@api.command("sign-cancel", help="""Print a signed request to cancel JOB, for
`POST /v1/studies/<study>/requests` (the API passes it on unchanged; it is valid for a
minute and once).""")
@click.argument("job")
@click.option("--study", envvar="CAIRN_STUDY", default=None,
              help="The job's study (default: $CAIRN_STUDY, else the context file).")
@click.option("--reason", default="cancelled", show_default=True)
@click.option("--creds", type=click.Path(dir_okay=False), default=None,
              help="Credentials file (default: $CAIRN_CREDS, else the context file).")
def sign_cancel_cmd(job: str, study: str | None, reason: str, creds: str | None) -> None:
    from cairn.names import check_name
    from cairn.trust.requests import RequestSigner

    name = study or _context().study
    if not name:
        raise InvalidInput("no study: pass --study or set CAIRN_STUDY", field="study")
    check_name(name, "study")
    envelope = api_types.Envelope(request=api_types.JobCancel(job=job, reason=reason),
                                  study=name)
    sys.stdout.buffer.write(RequestSigner.from_creds(_creds(creds)).sign(envelope) + b"\n")


@api.command("sign-submit", help="""Pack the job spec's code into --bundle and print a signed
request to submit the job, naming that bundle by its sha256: the two parts of
`POST /v1/studies/<study>/submit` (`envelope` and `bundle`). Your signature covers the code;
the request is valid for a minute and once.""")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False))
@click.option("--bundle", "bundle_out", type=click.Path(dir_okay=False), required=True,
              help="Where to write the packed code bundle.")
@click.option("--set", "sets", multiple=True, metavar="params.KEY=VALUE",
              help="Set a job parameter (repeatable), as `cairn job submit --set`.")
@click.option("--study", envvar="CAIRN_STUDY", default=None,
              help="The study (default: the spec's `study:`, $CAIRN_STUDY, the context file).")
@click.option("--creds", type=click.Path(dir_okay=False), default=None,
              help="Credentials file (default: $CAIRN_CREDS, else the context file).")
def sign_submit_cmd(spec: str, bundle_out: str, sets: tuple[str, ...], study: str | None,
                    creds: str | None) -> None:
    from pathlib import Path

    from cairn import codebundle
    from cairn.client.jobrequest import request_of_spec
    from cairn.names import check_name
    from cairn.spec.job import load_job_spec
    from cairn.spec.params import apply_sets
    from cairn.trust.requests import RequestSigner

    job = apply_sets(load_job_spec(spec), sets, file=spec)
    name = job.study or study or _context().study
    if not name:
        raise InvalidInput("no study: give the spec a `study:`, pass --study or set "
                           "CAIRN_STUDY", field="study")
    check_name(name, "study")
    packed = codebundle.pack(job.code)
    envelope = api_types.Envelope(request=api_types.Submit(spec=request_of_spec(
        job, packed.digest)), study=name)
    signed = RequestSigner.from_creds(_creds(creds)).sign(envelope)
    Path(bundle_out).write_bytes(packed.data)
    sys.stdout.buffer.write(signed + b"\n")
