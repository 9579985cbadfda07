"""`python -m cairn.runtime.health SERVICE... [cairn run's flags]`: exit 0 when every named
service of this site answers ready on `cairn.health.<service>.<site>`.

For container health checks and Kubernetes probes: it takes the same flags and environment as
`cairn run` (`CAIRN_NATS_URL`, `CAIRN_SITE`, `CAIRN_CREDS`, `CAIRN_TLS_*`, ...), so a check
asks exactly the parent it sits beside. Exit 1: a service answered but is not ready; 7: no
answer (the bus or the service is down); 3: bad flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from cairn import subjects
from cairn.bus import Bus
from cairn.errors import CairnError, Timeout, Unavailable
from cairn.events.decoding import decode_with
from cairn.runtime import context
from cairn.runtime.service import ServiceConfig, parse_args
from cairn.subjects.table import reply_inbox

if TYPE_CHECKING:
    from cairn.runtime.embedded import EmbeddedFederation

TIMEOUT_S = 3.0
ASK_S = 0.25
"""How long one round of health pings waits for answers while a federation starts."""
_ANY_JSON = msgspec.json.Decoder()


async def check(names: Sequence[str], config: ServiceConfig, timeout: float = TIMEOUT_S
                ) -> list[str]:
    """The services of `names` that are not ready (empty: all are)."""
    bus = await asyncio.wait_for(Bus.connect(
        config.nats_url, name=f"cairn-health@{config.site}", tls=config.tls_context(),
        creds=config.creds, connect_timeout=timeout), timeout + 1.0)
    try:
        not_ready = []
        for name in names:
            data = await bus.request(subjects.health(name, config.site), b"", timeout=timeout)
            if not is_ready(data):
                not_ready.append(name)
        return not_ready
    finally:
        await bus.close()


def is_ready(reply: bytes) -> bool:
    """Whether a health reply says ready; anything that is not a JSON object saying so is
    not (a stray responder on a health subject must not crash whoever asks)."""
    try:
        status = decode_with(_ANY_JSON, reply)
    except msgspec.DecodeError:
        return False
    return isinstance(status, dict) and status.get("ready") is True



async def wait_healthy(fed: EmbeddedFederation, timeout: float = 30.0,
                   progress: Callable[[int, int], None] | None = None) -> float:
    """Ping every service's health subject until all say ready; returns seconds taken.
    `progress(ready, total)` is called whenever more have answered."""
    assert fed.nats is not None
    t0 = time.monotonic()
    auth = fed.client_options()
    bus = await Bus.connect(fed.nats_url, name="cairn-up", retry_for=timeout,
                            creds=auth.get("creds"), tls=context.tls_context(
                                auth.get("tls_ca"), None, None))
    pings = Pings(bus)
    try:
        pending = set(fed.expected())
        total, told = len(pending), -1
        while pending:
            if progress is not None and total - len(pending) != told:
                told = total - len(pending)
                progress(told, total)
            for proc in fed.processes:
                if proc.proc.poll() is not None:
                    raise Unavailable(f"{proc.name} exited with {proc.proc.returncode}; "
                                      f"see {proc.log}")
            pending -= await pings.ask(pending, ASK_S)
            if pending and time.monotonic() - t0 > timeout:
                raise Timeout(f"not healthy after {timeout:g}s: "
                              + ", ".join(f"{s}@{t}" for s, t in sorted(pending)))
            if pending:
                # 10,000 simulated sites asked every 20 ms would be a load of their own on
                # the server and on the services being waited for.
                await asyncio.sleep(min(1.0, 0.02 * max(1.0, len(pending) / 200)))
    finally:
        await pings.close()
        await bus.close()
    return time.monotonic() - t0


class Pings:
    """Health pings to many services at once: each service's answers arrive on an inbox of
    its own health subject (`reply_inbox`), subscribed once for as long as it is asked (a
    service behind a leaf node may answer there and nowhere broader), and each round is one
    publish per service, not a request with a subscription of its own."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.base, _, self.token = bus.nc.new_inbox().rpartition(".")
        self.subs: dict[tuple[str, str], Subscription] = {}
        self.asked: set[tuple[str, str]] = set()
        self.heard: set[tuple[str, str]] = set()
        self.ready: set[tuple[str, str]] = set()
        self.everyone = asyncio.Event()

    async def ask(self, services: Collection[tuple[str, str]],
                  wait: float) -> set[tuple[str, str]]:
        """Those of `services` that answer ready within `wait` seconds (the round ends
        sooner once every one of them has answered, ready or not)."""
        self.asked, self.heard, self.ready = set(services), set(), set()
        self.everyone = asyncio.Event()
        for who in self.asked - self.subs.keys():
            self.subs[who] = await self.bus.nc.subscribe(
                reply_inbox(self.base, subjects.health(*who), "*"), cb=self._answer(who))
        for who in self.asked:
            subject = subjects.health(*who)
            await self.bus.nc.publish(subject, b"", reply=reply_inbox(self.base, subject,
                                                                       self.token))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.everyone.wait(), wait)
        ready = set(self.ready)
        for who in ready:
            with contextlib.suppress(Exception):
                await self.subs.pop(who).unsubscribe()
        return ready

    def _answer(self, who: tuple[str, str]) -> Callable[[Msg], Awaitable[None]]:
        async def answered(msg: Msg) -> None:
            if who not in self.asked:
                return
            # The server's "no responders" status says as much as a "not ready": the round
            # ends once every service asked has been heard of.
            if not (msg.headers and msg.headers.get("Status")) and is_ready(msg.data):
                self.ready.add(who)
            self.heard.add(who)
            if self.asked <= self.heard:
                self.everyone.set()
        return answered

    async def close(self) -> None:
        for sub in self.subs.values():
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self.subs.clear()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        names, config = parse_args(sys.argv[1:] if argv is None else argv)
        not_ready = asyncio.run(check(names, config))
    except CairnError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return exc.exit_code
    except TimeoutError:
        print(f"unhealthy: no answer from NATS within {TIMEOUT_S:g}s", file=sys.stderr)
        return 7
    if not_ready:
        print(f"not ready: {', '.join(not_ready)} at {config.site}", file=sys.stderr)
        return 1
    print(f"ready: {', '.join(names)} at {config.site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
