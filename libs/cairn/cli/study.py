"""`cairn study ...`: create studies and change who takes part."""

from __future__ import annotations

import click
import msgspec

from cairn.cli.output import Column, emit, output_option, print_table
from cairn.cli.session import session_options, with_client
from cairn.client import Client
from cairn.errors import InvalidInput
from cairn.events import StudyAdmin
from cairn.state.study import StudyState

ADMIN_ROLES = ("project_admin", "org_admin", "lead", "member")


@click.group(help="Create studies and change their sites and admins.")
def study() -> None:
    pass


def _admin(text: str) -> StudyAdmin:
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise InvalidInput(
            f"{text!r}: write NAME:ORG:ROLE, e.g. alice@org-a:org-a:lead", field="admin"
        )
    name, org, role = parts
    if role not in ADMIN_ROLES:
        raise InvalidInput(
            f"{role!r} is not a role; use one of {', '.join(ADMIN_ROLES)}", field="admin"
        )
    return msgspec.convert({"name": name, "org": org, "role": role}, StudyAdmin)


def _show(state: StudyState) -> None:
    click.echo(f"study {state.name}" + (f": {state.description}" if state.description else ""))
    click.echo(f"sites: {', '.join(state.sites) or '(none)'}")
    if state.held:
        click.echo("queue: HELD" + (f" ({state.hold_reason})" if state.hold_reason else "")
                   + "; `cairn study release` dispatches it again")
    print_table("admins", [Column("name", keep=True), Column("org", keep=True), Column("role")],
                [(a.name, a.org, a.role) for a in state.admins.values()])


def _list(states: list[StudyState]) -> None:
    print_table(
        None,
        [Column("study", keep=True), Column("sites", wrap=True), Column("admins", wrap=True),
         Column("created")],
        [
            (
                s.name,
                ", ".join(s.sites),
                ", ".join(s.admins),
                f"{s.created_at:%Y-%m-%d %H:%M}" if s.created_at else "",
            )
            for s in states
        ],
    )


@study.command(help="Create a study with its first sites and admins (a project_admin's right).")
@click.argument("name")
@click.option(
    "--site", "sites", multiple=True, metavar="SITE", help="A participating site (repeat for each)."
)
@click.option(
    "--admin",
    "admins",
    multiple=True,
    metavar="NAME:ORG:ROLE",
    help=f"An admin (repeat for each); ROLE is one of {', '.join(ADMIN_ROLES)}.",
)
@click.option("--description", default="", help="One line saying what the study is for.")
@click.option(
    "--actor",
    envvar="CAIRN_ACTOR",
    metavar="NAME",
    help="Who is asking (default: $CAIRN_ACTOR); the signer in a secure federation.",
)
@output_option(schema=StudyState)
def create(
    name: str,
    sites: tuple[str, ...],
    admins: tuple[str, ...],
    description: str,
    actor: str | None,
    output: str,
) -> None:
    parsed = [_admin(a) for a in admins]

    async def body(c: Client) -> StudyState:
        return await c.study_create(name, list(sites), parsed, description)

    emit(with_client(None, actor, body), output, _show)


@study.command(name="list", help="List the federation's studies.")
@click.option(
    "--actor",
    envvar="CAIRN_ACTOR",
    metavar="NAME",
    help="Who is asking (default: $CAIRN_ACTOR); the signer in a secure federation.",
)
@output_option(schema=list[StudyState])
def list_(actor: str | None, output: str) -> None:
    async def body(c: Client) -> list[StudyState]:
        return await c.study_list()

    emit(with_client(None, actor, body), output, _list)


@study.command(help="Show the session's study: sites and admins.")
@session_options
@output_option(schema=StudyState)
def show(study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_show()

    emit(with_client(study, actor, body), output, _show)


@study.command(name="add-site", help="Add a site to the session's study.")
@click.argument("site")
@session_options
@output_option(schema=StudyState)
def add_site(site: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_add_site(site)

    emit(with_client(study, actor, body), output, _show)


@study.command(name="remove-site", help="Remove a site from the session's study.")
@click.argument("site")
@session_options
@output_option(schema=StudyState)
def remove_site(site: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_remove_site(site)

    emit(with_client(study, actor, body), output, _show)


@study.command(help="Hold the session's study's queue: jobs are accepted and queued, none is "
               "dispatched and none times out in the queue until `cairn study release` "
               "(a project_admin's right). Running jobs go on.")
@click.option("--reason", default="", help="Why, shown to whoever looks at the queue.")
@session_options
@output_option(schema=StudyState)
def hold(reason: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_hold(True, reason)

    emit(with_client(study, actor, body), output, _show)


@study.command(help="Release the session's study's queue: its queued jobs are dispatched as "
               "capacity allows, and their queue timeouts start again now.")
@session_options
@output_option(schema=StudyState)
def release(study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_hold(False)

    emit(with_client(study, actor, body), output, _show)


@study.command(name="add-admin", help="Add an admin to the session's study.")
@click.argument("name")
@click.option("--org", required=True, help="The admin's organization.")
@click.option(
    "--role",
    type=click.Choice(ADMIN_ROLES),
    default="member",
    show_default=True,
    help="The admin's role in the study.",
)
@session_options
@output_option(schema=StudyState)
def add_admin(
    name: str, org: str, role: str, study: str | None, actor: str | None, output: str
) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_add_admin(name, org, role)

    emit(with_client(study, actor, body), output, _show)


@study.command(name="remove-admin", help="Remove an admin from the session's study.")
@click.argument("name")
@session_options
@output_option(schema=StudyState)
def remove_admin(name: str, study: str | None, actor: str | None, output: str) -> None:
    async def body(c: Client) -> StudyState:
        return await c.study_remove_admin(name)

    emit(with_client(study, actor, body), output, _show)
