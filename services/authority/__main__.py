"""`python -m cairn.authority --kit DIR --nats-url URL [--federation FILE]`."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from cairn.errors import CairnError
from cairn.runtime.logs import setup_logging


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cairn.authority",
                                description="The federation's auth callout (runs on the hub).")
    p.add_argument("--kit", required=True, help="the authority's folder from `cairn provision`")
    p.add_argument("--nats-url", default=os.environ.get("CAIRN_NATS_URL"), required=False)
    p.add_argument("--federation", help="federation.yaml: the studies to start from")
    p.add_argument("--session", type=float,
                   default=float(os.environ.get("CAIRN_AUTHORITY_SESSION_S", "900")),
                   help="seconds an admitted connection's rights last before it reconnects "
                        "for a fresh decision (default 900)")
    p.add_argument("--servers", type=int, default=None,
                   help="how many nats-servers the federation has, when that is certain (a "
                        "restart then re-learns connections without waiting for more "
                        "answers); default: unknown")
    p.add_argument("--lease-ttl", type=float,
                   default=float(os.environ.get("CAIRN_LEASE_TTL_S", "3")),
                   help="seconds the active authority's lease outlives its last renewal: a "
                        "standby authority takes over that long after it dies (default 3)")
    p.add_argument("--log-level", default=os.environ.get("CAIRN_LOG_LEVEL", "info"))
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    setup_logging(a.log_level, "text", "authority", "hub")
    try:
        from cairn.authority.service import AuthorityService
        from cairn.spec.federation import load_federation

        fed = load_federation(a.federation) if a.federation else None
        service = AuthorityService(Path(a.kit), a.nats_url or "tls://127.0.0.1:4222", fed,
                                   session_s=a.session, servers=a.servers,
                                   lease_ttl_s=a.lease_ttl)

        async def run() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await service.run(stop)

        asyncio.run(run())
    except CairnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    # Another instance holds the lease now: exit so the supervisor starts this one again,
    # as a standby.
    return 7 if service.lost_lease else 0


if __name__ == "__main__":
    sys.exit(main())
