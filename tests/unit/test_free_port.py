"""`free_port`: the ports a federation's servers are started on are picked where no outgoing
connection on the machine can take them before the server binds (below the kernel's
ephemeral range), and one process is not given the same port twice while its servers may
still be starting."""

from __future__ import annotations

import socket
from pathlib import Path

from cairn.runtime.natsserver import free_port


def _ephemeral() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
    return int(low), int(high)


def test_a_free_port_is_outside_the_range_outgoing_connections_draw_from() -> None:
    low, high = _ephemeral()
    ports = [free_port() for _ in range(100)]
    assert all(p < low for p in ports), [p for p in ports if p >= low]
    # An outgoing connection's own port comes from that range: never one handed out here.
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as out:
        assert low <= out.getsockname()[1] <= high


def test_the_ports_handed_out_lately_are_distinct_and_bindable() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))

