"""`cairn deadletter ...`: messages consumers gave up on, and putting them back."""

from __future__ import annotations

import base64

import click

from cairn.cli.output import Column, emit, output_option, print_table
from cairn.cli.session import run
from cairn.client import Client, DeadLetter
from cairn.errors import InvalidInput


@click.group(help="Inspect and redrive dead-lettered events (stream DEADLETTER).")
def deadletter() -> None:
    pass


async def _connect() -> Client:
    # Dead letters are federation-wide: no study, and no actor is sent anywhere.
    return await Client.connect()


def _payload_text(b64: str) -> str:
    data = base64.b64decode(b64)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(data)} bytes, not UTF-8; base64: {b64}>"


def _as_dict(d: DeadLetter) -> dict[str, object]:
    if d.event is None:
        return {"seq": d.seq, "error": f"undecodable dead letter: {d.error}"}
    e = d.event
    return {
        "seq": d.seq,
        "at": e.at,
        "stream": e.stream,
        "subject": e.subject,
        "consumer": e.consumer,
        "stream_seq": e.stream_seq,
        "deliveries": e.deliveries,
        "error": e.error,
        "headers": e.headers,
        "payload": _payload_text(e.payload_b64),
    }


@deadletter.command(name="list", help="List dead letters: where each came from and why.")
@output_option()
def list_(output: str) -> None:
    async def body() -> list[DeadLetter]:
        async with await _connect() as c:
            return await c.dead_letters()

    items = [_as_dict(d) for d in run(body())]

    def table(rows: list[dict[str, object]]) -> None:
        if not rows:
            click.echo("no dead letters")
            return
        print_table(
            None,
            [Column("seq", keep=True), Column("at"), Column("stream"),
             Column("subject", keep=True), Column("consumer", keep=True), Column("deliveries"),
             Column("error", wrap=True)],
            [
                (
                    r["seq"],
                    r.get("at"),
                    r.get("stream"),
                    r.get("subject"),
                    r.get("consumer"),
                    r.get("deliveries"),
                    str(r.get("error")),
                )
                for r in rows
            ],
        )

    emit(items, output, table)


@deadletter.command(help="Show one dead letter (SEQ from `list`), with its original payload.")
@click.argument("seq", type=click.IntRange(min=1))
@output_option(default="yaml")
def show(seq: int, output: str) -> None:
    async def body() -> DeadLetter:
        async with await _connect() as c:
            return await c.dead_letter(seq)

    emit(_as_dict(run(body())), output)


@deadletter.command(
    help="Publish a dead letter's original payload and headers to its original "
    "subject again (message id `<original>-redrive-SEQ`), then delete it."
)
@click.argument("seq", type=click.IntRange(min=1))
def redrive(seq: int) -> None:
    async def body() -> tuple[str, int]:
        async with await _connect() as c:
            dead = await c.dead_letter(seq)
            if dead.event is None:
                raise InvalidInput(f"dead letter {seq} cannot be decoded: {dead.error}")
            return dead.event.subject, await c.redrive(seq)

    subject, new_seq = run(body())
    click.echo(f"dead letter {seq} redriven to {subject} (stored there as {new_seq})")
