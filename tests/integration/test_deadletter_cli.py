"""`cairn deadletter list/show/redrive` against a real nats-server."""

from __future__ import annotations

import asyncio
import json

import yaml

from cairn import events as ev
from cairn import subjects
from cairn.bus import MSG_ID, Bus, Delivery, Subscription, replay
from cairn.client import get_message
from cairn.runtime.natsserver import NatsServer
from tests.cli_runner import cairn as run_cairn

STUDY = "lung"
GARBAGE = b'{"type": "job.submitted", "this is": "not a job"}'


def cairn(url: str, *args: str) -> tuple[int, str, str]:
    return run_cairn(*args, env={"CAIRN_NATS_URL": url,
                                 "CAIRN_CONTEXT": "/nonexistent/context.yaml"})


async def dead_letter_garbage(bus: Bus) -> str:
    """Store an undecodable event and let a consumer give up on it; returns its subject."""
    await bus.ensure_study(STUDY)
    subject = subjects.job(STUDY, "j-1", "submitted")
    await bus.publish_bytes(subject, GARBAGE, msg_id="garbage-1", headers={"x-origin": "test"})

    async def handler(event: ev.StudyStreamEvent, delivery: Delivery) -> None:
        return None

    sub = Subscription(
        bus,
        stream=subjects.study_stream(STUDY).name,
        durable="dl-test",
        filters=[subjects.study_all(STUDY)],
        decoder=ev.STUDY_DECODER,
        handler=handler,
    )
    await sub.start()
    try:
        for _ in range(100):
            if sub.dead_lettered:
                break
            await asyncio.sleep(0.05)
    finally:
        await sub.stop()
    assert sub.dead_lettered == 1
    return subject


async def test_list_show_and_redrive_a_dead_letter(bus: Bus, nats_server: NatsServer) -> None:
    subject = await dead_letter_garbage(bus)
    url = nats_server.url

    code, out, err = await asyncio.to_thread(cairn, url, "deadletter", "list", "-o", "json")
    assert code == 0, err
    [item] = json.loads(out)
    assert item["subject"] == subject
    assert item["stream"] == f"STUDY_{STUDY}"
    assert item["consumer"] == "dl-test"
    assert "undecodable" in item["error"]
    seq = item["seq"]

    code, out, err = await asyncio.to_thread(cairn, url, "deadletter", "list")
    assert code == 0, err
    assert "dl-test" in out

    code, out, err = await asyncio.to_thread(cairn, url, "deadletter", "show", str(seq))
    assert code == 0, err
    shown = yaml.safe_load(out)
    assert shown["payload"] == GARBAGE.decode()
    assert shown["headers"]["x-origin"] == "test"

    code, out, err = await asyncio.to_thread(cairn, url, "deadletter", "redrive", str(seq))
    assert code == 0, err
    assert f"redriven to {subject}" in out

    # The original subject got the payload again, with its headers and a new message id.
    stored = [r async for r in replay(bus, f"STUDY_{STUDY}")]
    assert [r.raw for r in stored] == [GARBAGE, GARBAGE]
    got_subject, headers, data = await get_message(bus, f"STUDY_{STUDY}", stored[-1].seq)
    assert (got_subject, data) == (subject, GARBAGE)
    assert headers[MSG_ID] == f"garbage-1-redrive-{seq}"
    assert headers["x-origin"] == "test"

    # ... and the dead letter is gone.
    code, out, err = await asyncio.to_thread(cairn, url, "deadletter", "list", "-o", "json")
    assert code == 0, err
    assert json.loads(out) == []


async def test_a_missing_dead_letter_is_not_found(bus: Bus, nats_server: NatsServer) -> None:
    await bus.ensure(subjects.DEADLETTER_STREAM)
    code, _, err = await asyncio.to_thread(cairn, nats_server.url, "deadletter", "show", "42")
    assert code == 4
    assert "no message 42 in stream DEADLETTER" in err
    code, _, err = await asyncio.to_thread(cairn, nats_server.url, "deadletter", "redrive", "42")
    assert code == 4
