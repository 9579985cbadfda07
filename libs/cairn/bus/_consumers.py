"""Consumers with names their creator owns.

In a secure federation an identity may create, pull from, inspect and delete only consumers
whose names are its own (the subject table's durables, and a few ephemeral names: see
`cairn.subjects.table.owned_names`). An ephemeral read takes one of its names that is free:
it creates the consumer with JetStream's `create` action and a config no one else holds, so
a name already in use (another process of the same identity, or one left by a crashed one
until it goes inactive) fails and the next name is tried; the one made is never someone
else's. The filter, when there is one, travels in the API subject, where the broker checks
it against the identity's rights.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api

from cairn.errors import NotFound, PermissionDenied, Timeout, Unavailable
from cairn.subjects.table import js_consumer_create

if TYPE_CHECKING:
    from cairn.bus._connection import Bus

ALREADY_EXISTS = 10148
STREAM_NOT_FOUND = 10059
SLOT_WAIT_S = 20.0
"""How long an ephemeral read waits for one of its names to be free before giving up."""


@dataclass(frozen=True)
class ConsumerNames:
    """The consumer names a connection may use.

    Attributes:
        owner: The token its ephemeral names start with.
        names: Its ephemeral names; empty when it may use any name (the hub, or an insecure
            federation), and then each ephemeral gets a fresh random one.
    """

    owner: str = "cairn"
    names: tuple[str, ...] = ()

    @property
    def restricted(self) -> bool:
        return bool(self.names)


def _create_subject(stream: str, name: str, config: api.ConsumerConfig) -> str:
    single = config.filter_subject if not config.filter_subjects else None
    return js_consumer_create(stream, name, single)


async def create_consumer(bus: Bus, stream: str, config: api.ConsumerConfig, *,
                          action: str = "", timeout: float = 5.0) -> dict[str, Any]:
    """Create (or, with no `action`, create or update) the consumer `config.name`.

    Raises:
        NotFound: the stream does not exist.
        PermissionDenied: the server refused (a name or filter this identity does not own).
        Unavailable: JetStream did not answer, or this connection is closed for good.
        CairnError: any other refusal, with the server's description.
    """
    assert config.name
    body: dict[str, Any] = {"stream_name": stream, "config": config.as_dict()}
    if action:
        body["action"] = action
    subject = bus.api_subject(_create_subject(stream, config.name, config))
    try:
        msg = await bus.nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    except NoRespondersError:
        raise Unavailable("JetStream did not answer a consumer create") from None
    except ConnectionClosedError:
        raise Unavailable(f"the connection to NATS is closed ({bus.lost_reason or 'closed'}); "
                          f"consumer {config.name} on {stream} was not created") from None
    except (TimeoutError, NatsTimeout):
        # A publish the broker refuses is dropped without an answer, and said on the side;
        # without that, JetStream was slow (a stream electing its leader): ask again.
        if any(f'"{subject.lower()}"' in refusal for refusal in bus.refusals):
            raise PermissionDenied(f"no answer creating consumer {config.name} on {stream}: "
                                   "this identity may not read it that way") from None
        raise NoAnswer(f"JetStream did not answer creating consumer {config.name} on "
                       f"{stream} within {timeout:g}s") from None
    reply: dict[str, Any] = json.loads(msg.data or b"{}")
    error = reply.get("error")
    if error:
        code = int(error.get("err_code", 0))
        text = str(error.get("description", error))
        if code == STREAM_NOT_FOUND:
            raise NotFound(f"stream {stream} does not exist")
        raise _ConsumerError(code, f"consumer {config.name} on {stream}: {text}")
    return reply


class NoAnswer(Unavailable):
    """JetStream did not answer a consumer create in time, and the server refused nothing."""


class _ConsumerError(Unavailable):
    def __init__(self, err_code: int, message: str) -> None:
        super().__init__(message)
        self.err_code = err_code


async def create_ephemeral(bus: Bus, stream: str, config: api.ConsumerConfig, *,
                           purpose: str = "read") -> api.ConsumerInfo:
    """Create an ephemeral consumer under one of this connection's own names.

    Raises:
        NotFound: the stream does not exist.
        PermissionDenied: the broker refused the read.
        Timeout: every owned name stayed in use for `SLOT_WAIT_S`.
        NoAnswer: JetStream did not answer for `SLOT_WAIT_S` (asked again meanwhile).
    """
    names = bus.consumer_names
    nonce = os.urandom(6).hex()
    if not names.restricted:
        name = f"{names.owner}_{nonce}"
        deadline = time.monotonic() + SLOT_WAIT_S
        while True:
            try:
                reply = await create_consumer(bus, stream,
                                              config.evolve(name=name, description=purpose))
                return _info(reply)
            except NoAnswer:
                if time.monotonic() >= deadline:
                    raise
    order = list(names.names)
    start = random.randrange(len(order))
    order = order[start:] + order[:start]
    deadline = time.monotonic() + SLOT_WAIT_S
    delay = 0.05
    while True:
        for name in order:
            # A description no other consumer holds: `create` then fails on any name in use.
            cfg = config.evolve(name=name, description=f"{purpose} {nonce}")
            try:
                return _info(await create_consumer(bus, stream, cfg, action="create"))
            except NoAnswer:
                if time.monotonic() >= deadline:
                    raise
                break  # from the first name again, after the pause
            except _ConsumerError as exc:
                if exc.err_code != ALREADY_EXISTS:
                    raise
        if time.monotonic() >= deadline:
            raise Timeout(f"all {len(order)} consumer names of {names.owner} on {stream} "
                          f"stayed in use for {SLOT_WAIT_S:g}s: too many reads at once")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


def _info(reply: dict[str, Any]) -> api.ConsumerInfo:
    info: api.ConsumerInfo = api.ConsumerInfo.from_response(reply)
    return info


async def delete_consumer(bus: Bus, stream: str, name: str) -> None:
    try:
        await bus.js.delete_consumer(stream, name)
    except Exception:  # gone already, or the connection is: it expires on its own
        pass
