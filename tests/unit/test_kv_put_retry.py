"""A KV write is asked again while JetStream does not answer: on a cluster whose bucket
leader just died, a put answers "no response from stream" for a few seconds, and a launcher
that lost its record then lost track of a worker it had started (the job never ended)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from nats.js.errors import NoStreamResponseError

from cairn.bus import KV, Bus
from cairn.errors import Unavailable


class Thing(msgspec.Struct):
    n: int


class ElectingKV:
    """A bucket whose first `silent` writes get no answer, as during an election."""

    def __init__(self, silent: int) -> None:
        self.silent = silent
        self.stored: dict[str, bytes] = {}

    async def put(self, key: str, value: bytes) -> int:
        if self.silent:
            self.silent -= 1
            raise NoStreamResponseError
        self.stored[key] = value
        return len(self.stored)

    async def delete(self, key: str) -> None:
        if self.silent:
            self.silent -= 1
            raise NoStreamResponseError
        self.stored.pop(key, None)


def _kv(inner: Any) -> KV[Thing]:
    return KV(inner, Thing, bucket="launches_site-a", bus=Bus.__new__(Bus))


async def test_a_put_during_an_election_is_stored_once_it_ends() -> None:
    inner = ElectingKV(silent=3)
    assert await _kv(inner).put("l1", Thing(n=1)) == 1
    assert msgspec.json.decode(inner.stored["l1"], type=Thing) == Thing(n=1)


async def test_a_delete_during_an_election_is_done_once_it_ends() -> None:
    inner = ElectingKV(silent=0)
    kv = _kv(inner)
    await kv.put("l1", Thing(n=1))
    inner.silent = 2
    await kv.delete("l1")
    assert inner.stored == {}


async def test_a_put_that_never_answers_is_unavailable_and_timeout_0_tries_once() -> None:
    inner = ElectingKV(silent=10**6)
    with pytest.raises(Unavailable, match="put l1 in launches_site-a"):
        await _kv(inner).put("l1", Thing(n=1), timeout=0.3)
    before = inner.silent
    with pytest.raises(Unavailable):
        await _kv(inner).put("hb", Thing(n=2), timeout=0)
    assert before - inner.silent == 1, "a heartbeat's put is tried once"
