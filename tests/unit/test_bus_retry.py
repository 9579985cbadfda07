"""What a publish does with JetStream's passing refusals: asks again, within its budget."""

from __future__ import annotations

import pytest
from nats.js.errors import APIError

from cairn.bus import Bus
from cairn.errors import Unavailable


async def _answers(*answers: Exception | str) -> tuple[list[str], object]:
    asked: list[str] = []
    queue = list(answers)

    async def call() -> str:
        asked.append("asked")
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return asked, call


async def test_a_publish_whose_first_attempt_is_still_replicating_is_asked_again() -> None:
    # In a cluster, a publish asked again after its answer timed out (a server died under
    # it) may hear "duplicate message id is in process": the first attempt is still being
    # replicated. The same id asked again gets its ack; a worker must not die of it.
    asked, call = await _answers(
        APIError(code=409, err_code=10158, description="duplicate message id is in process"),
        "ack")
    bus = Bus.__new__(Bus)
    assert await bus._retry(call, what="publish", budget=5) == "ack"  # type: ignore[arg-type]
    assert len(asked) == 2


async def test_a_real_refusal_is_not_asked_again() -> None:
    asked, call = await _answers(
        APIError(code=400, err_code=10071, description="wrong last sequence"), "ack")
    bus = Bus.__new__(Bus)
    with pytest.raises(APIError):
        await bus._retry(call, what="publish", budget=5)  # type: ignore[arg-type]
    assert len(asked) == 1


async def test_asking_again_ends_with_the_budget() -> None:
    busy = APIError(code=409, err_code=10158, description="duplicate message id is in process")
    asked, call = await _answers(*[busy] * 50)
    bus = Bus.__new__(Bus)
    with pytest.raises(Unavailable, match="publish"):
        await bus._retry(call, what="publish", budget=0.3)  # type: ignore[arg-type]
    assert 2 <= len(asked) < 50
