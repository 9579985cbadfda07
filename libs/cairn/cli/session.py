"""What every client command shares: `--study`, `--actor`, connecting, running a coroutine."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import click

from cairn import telemetry
from cairn.client import Client

P = ParamSpec("P")
R = TypeVar("R")

ACTOR_HELP = (
    "Who is asking (default: $CAIRN_ACTOR, else the context file). A secure federation "
    "records the signer of the request instead; only --insecure takes it on trust."
)


def session_options(func: Callable[P, R]) -> Callable[P, R]:
    """Add `--study` and `--actor` (each also read from its environment variable)."""
    func = click.option("--actor", envvar="CAIRN_ACTOR", metavar="NAME", help=ACTOR_HELP)(func)
    func = click.option(
        "--study",
        envvar="CAIRN_STUDY",
        metavar="STUDY",
        help="The session's study (default: $CAIRN_STUDY, else the context file).",
    )(func)
    return func


def run(coro: Coroutine[Any, Any, R]) -> R:
    """Run one command's coroutine to completion (Ctrl-C ends it without a traceback)."""
    return asyncio.run(coro)


def with_client(study: str | None, actor: str | None, body: Callable[[Client], Awaitable[R]]) -> R:
    """Connect, run `body(client)`, close: the shape of every client command.

    With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the command is the root span of its trace (a
    `cairn job submit` begins the job's trace, which every service then continues)."""
    ctx = click.get_current_context(silent=True)
    words: list[str] = []
    while ctx is not None and ctx.parent is not None:
        words.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    name = " ".join(["cairn", *words])
    traced = telemetry.setup("cairn-cli")

    async def main() -> R:
        with telemetry.span(name, **{"cairn.study": study or "", "cairn.actor": actor or ""}):
            async with await Client.connect(study=study, actor=actor) as client:
                return await body(client)

    try:
        return run(main())
    finally:
        if traced:
            telemetry.shutdown()
