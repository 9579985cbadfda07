"""`python -m cairn.runtime.health SERVICE... [cairn run's flags]`: exit 0 when every named
service of this site answers ready on `cairn.health.<service>.<site>`.

For container health checks and Kubernetes probes: it takes the same flags and environment as
`cairn run` (`CAIRN_NATS_URL`, `CAIRN_SITE`, `CAIRN_CREDS`, `CAIRN_TLS_*`, ...), so a check
asks exactly the parent it sits beside. Exit 1: a service answered but is not ready; 7: no
answer (the bus or the service is down); 3: bad flags.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from cairn import subjects
from cairn.bus import Bus
from cairn.errors import CairnError, Timeout, Unavailable
from cairn.events.decoding import decode_with
from cairn.runtime import context
from cairn.runtime.service import ServiceConfig, parse_args

if TYPE_CHECKING:
    from cairn.runtime.embedded import EmbeddedFederation

TIMEOUT_S = 3.0
ASK_AT_ONCE = 200
"""Health pings in flight at once while waiting for a federation to start."""
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
    # At most this many asked at once, and a pause that grows with how many are still to
    # answer: 10,000 simulated sites asked all at once, every 20 ms, are a load of their own
    # on the server and the services they wait for.
    asking = asyncio.Semaphore(ASK_AT_ONCE)
    try:
        async def ready(svc: str, site: str) -> bool:
            async with asking:
                try:
                    reply = await bus.request(subjects.health(svc, site), b"", timeout=0.25)
                except Exception:
                    return False
            return is_ready(reply)

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
            # All at once: a simulated federation has hundreds of services to ask.
            asked = sorted(pending)
            answers = await asyncio.gather(*(ready(svc, site) for svc, site in asked))
            pending.difference_update(k for k, ok in zip(asked, answers, strict=True) if ok)
            if pending and time.monotonic() - t0 > timeout:
                raise Timeout(f"not healthy after {timeout:g}s: "
                              + ", ".join(f"{s}@{t}" for s, t in sorted(pending)))
            if pending:
                await asyncio.sleep(min(1.0, 0.02 * max(1.0, len(pending) / ASK_AT_ONCE)))
    finally:
        await bus.close()
    return time.monotonic() - t0


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
