"""`cairn site ...`: the federation's sites as the coordinator sees them."""

from __future__ import annotations

import click

from cairn.api import SiteInfo
from cairn.cli.output import Column, emit, output_option, print_table
from cairn.cli.session import session_options, with_client
from cairn.client import Client
from cairn.events import Resources
from cairn.spec.quantity import format_cpus, format_memory


@click.group(help="List and show sites (the study's sites with --study, else all).")
def site() -> None:
    pass


def _res(r: Resources | None) -> str:
    if r is None:
        return ""
    return f"{r.gpus} gpu, {format_cpus(r.millicpus)} cpu, {format_memory(r.memory_bytes)}"


def _rows(sites: list[SiteInfo]) -> list[tuple[object, ...]]:
    return [
        (
            s.name + (" (hub)" if s.hub else ""),
            s.org,
            "online" if s.online else "offline",
            s.backend,
            _res(s.free),
            _res(s.capacity),
            s.running,
            f"{s.last_seen:%H:%M:%S}" if s.last_seen else "",
        )
        for s in sites
    ]


COLUMNS = [Column("site", keep=True), Column("org"), Column("status"), Column("backend"),
           Column("free", wrap=True), Column("capacity", wrap=True), Column("running"),
           Column("last seen")]


@site.command(name="list", help="List sites: status, backend, free and total capacity.")
@session_options
@output_option(schema=list[SiteInfo])
def list_(study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> list[SiteInfo]:
        return await c.sites()

    emit(with_client(study, actor, body), output, lambda d: print_table(None, COLUMNS, _rows(d)))


@site.command(help="Show one site.")
@click.argument("name")
@session_options
@output_option(schema=SiteInfo)
def show(name: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> SiteInfo:
        return await c.site(name)

    def table(s: SiteInfo) -> None:
        print_table(None, COLUMNS, _rows([s]))
        if s.studies:
            click.echo(f"studies: {', '.join(s.studies)}")

    emit(with_client(study, actor, body), output, table)
