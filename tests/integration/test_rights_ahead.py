"""A subscription made ahead of the rights that will name it (the leaf anchors subscribe a
new study's subjects a moment before the authority renews their connection) is not warned of
as a refusal until the next reconnect; any other refusal still is, and is remembered."""

from __future__ import annotations

import logging

import pytest

from cairn.bus import Bus
from cairn.runtime.embedded import EmbeddedFederation
from tests.integration.security_helpers import ca_context

AHEAD = "cairn.study.nope.job.*.site.site-a.running"
FORBIDDEN = "cairn.study.nope.job.*.site.site-a.accepted"


async def test_a_subscription_ahead_of_its_rights_is_not_a_refusal_and_others_are(
        federation: EmbeddedFederation, caplog: pytest.LogCaptureFixture) -> None:
    assert federation.nats is not None and federation.trust is not None
    caplog.set_level(logging.INFO, logger="cairn.bus")
    bus = await Bus.connect(federation.nats.url, name="ahead",
                            creds=str(federation.trust.creds("site-a")),
                            tls=ca_context(federation))

    async def noop(_msg: object) -> None:
        return None

    try:
        await bus.subscribe_core(AHEAD, noop, ahead=True)
        await bus.subscribe_core(FORBIDDEN, noop)
        # The two answers come in order: the second one's line proves the first's came.
        for _ in range(100):
            await bus.nc.flush()
            if any(FORBIDDEN in r.getMessage() for r in caplog.records):
                break
        ahead = [r for r in caplog.records if AHEAD in r.getMessage()]
        forbidden = [r for r in caplog.records if FORBIDDEN in r.getMessage()]
        assert forbidden and all(r.levelno == logging.WARNING for r in forbidden), forbidden
        assert any(FORBIDDEN in r for r in bus.refusals)
        assert ahead, "the server answered the first subscription too"
        assert all(r.levelno == logging.INFO and "renewed rights" in r.getMessage()
                   for r in ahead), ahead
        assert not any(AHEAD in r for r in bus.refusals)
    finally:
        await bus.close()
