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
from collections.abc import Sequence

import msgspec

from cairn import subjects
from cairn.bus import Bus
from cairn.errors import CairnError
from cairn.events.decoding import decode_with
from cairn.runtime.service import ServiceConfig, parse_args

TIMEOUT_S = 3.0
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
