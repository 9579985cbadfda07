"""How many copies JetStream keeps of each stream, KV bucket and object store Cairn makes.

One server keeps one. A cluster keeps `min(3, servers)` by default: three copies survive the
loss of any one server (a quorum of two remains) and more cost writes without buying much.
`cairn up --cluster N`, the compose cluster override and the federation chart set
`CAIRN_REPLICAS` for every process they start; an operator may set it to any of 1 to 5 (no
more than the cluster has servers: JetStream refuses a stream it cannot place).
"""

from __future__ import annotations

import os

from cairn.errors import InvalidInput

REPLICAS_ENV = "CAIRN_REPLICAS"
MAX_REPLICAS = 5
"""JetStream's own limit on a stream's replicas."""


def replicas_for(servers: int) -> int:
    """The default for a cluster of `servers` nats-servers."""
    return max(1, min(3, servers))


def configured_replicas(environ: dict[str, str] | None = None) -> int:
    """`CAIRN_REPLICAS` (1 when unset).

    Raises:
        InvalidInput: it is set to something other than a whole number 1..5.
    """
    raw = (os.environ if environ is None else environ).get(REPLICAS_ENV, "").strip()
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_REPLICAS:
        raise InvalidInput(f"${REPLICAS_ENV}={raw!r}: the number of copies of each stream "
                           f"must be a whole number from 1 to {MAX_REPLICAS}")
    return value
