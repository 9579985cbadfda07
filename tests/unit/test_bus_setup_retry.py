"""Making a stream or bucket on a cluster that is still forming is asked again: JetStream
answers "no suitable peers" or "temporarily unavailable" until its peers and leaders are
known, and a service that gave up then would exit before it ever started."""

from __future__ import annotations

import pytest
from nats.js.errors import APIError, BadRequestError, ServiceUnavailableError

from cairn.bus import Bus
from cairn.errors import Unavailable


def _bus() -> Bus:
    return Bus.__new__(Bus)  # setup needs no connection of its own


async def test_a_cluster_still_forming_is_asked_again() -> None:
    answers: list[Exception] = [
        BadRequestError(code=400, err_code=10005, description="no suitable peers for placement"),
        ServiceUnavailableError(code=503, err_code=10008,
                                description="JetStream system temporarily unavailable"),
        APIError(code=500, err_code=10118, description="stream is offline")]

    async def make() -> str:
        if answers:
            raise answers.pop(0)
        return "made"

    assert await _bus().setup(make, what="the bucket leases", budget=10) == "made"
    assert not answers


async def test_a_refusal_is_not_asked_again() -> None:
    calls = 0

    async def make() -> None:
        nonlocal calls
        calls += 1
        raise BadRequestError(code=400, err_code=10052, description="invalid stream config")

    with pytest.raises(BadRequestError):
        await _bus().setup(make, what="the stream X", budget=10)
    assert calls == 1


async def test_what_never_answers_is_unavailable_after_the_budget() -> None:
    async def make() -> None:
        raise BadRequestError(code=400, err_code=10005, description="no suitable peers")

    with pytest.raises(Unavailable, match="the bucket leases"):
        await _bus().setup(make, what="the bucket leases", budget=0.3)
