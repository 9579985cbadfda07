"""`cairn up --leaf-sites`: a leaf node per site but the hub, and the site's parent on it.

The federation's server gains a leafnode listener; each site's leaf dials it with the site's
own credential (`cairn.runtime.leaf`). The site's parent connects to its leaf. Its workers
connect to the federation with their own job-lifetime credential, not through the leaf: a
leaf link is one identity at the broker (the site's), and a worker's events must arrive under
the worker's own (the subject table lets no site write a worker's subjects).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import TYPE_CHECKING

from cairn.errors import InvalidInput, Unavailable
from cairn.runtime.leaf import LeafNode, ServerTls, hub_leafnodes_block
from cairn.runtime.natsserver import free_port
from cairn.subjects.table import JS_DOMAIN
from cairn.trust.natsconfig import write_nats_config

if TYPE_CHECKING:
    from cairn.runtime._fedprocs import Process
    from cairn.runtime.embedded import EmbeddedFederation


def server_tls(fed: EmbeddedFederation) -> ServerTls:
    assert fed.trust is not None
    server = fed.trust.dir / "server"
    return ServerTls(cert=server / "server.pem", key=server / "server.key", ca=fed.trust.ca)


def prepare_leaves(fed: EmbeddedFederation) -> None:
    """Add the leafnode listener to the server's config and plan a leaf per site (before the
    server starts).

    Raises:
        InvalidInput: the federation is insecure (a leaf dials with the site's credential).
    """
    if fed.trust is None or fed.nats is None or fed.nats.config_file is None:
        raise InvalidInput("--leaf-sites needs the secure federation (a leaf node dials out "
                           "with its site's credential): drop --insecure", field="leaf-sites")
    host = fed.nats.host
    tls = server_tls(fed)
    if fed.cluster is not None:
        # Every member listens for leaves (`NatsCluster.configure`); a leaf is given them all
        # and dials another when its server is lost.
        fed.cluster.configure(fed.trust.dir, leaves=True)
        uplink_of_all = fed.cluster.leaf_url
    else:
        fed.leaf_port = fed.leaf_port or free_port(host)
        # JetStream gets a domain only here: leaf clients need it to name the federation's.
        config = write_nats_config(fed.trust.dir, host=host, port=fed.nats.port,
                                   monitor_port=fed.nats.monitor_port,
                                   store_dir=fed.nats.store_dir.resolve(), js_domain=JS_DOMAIN)
        config.write_text(config.read_text() + hub_leafnodes_block(host, fed.leaf_port, tls))
        fed.nats.config_file = config
        uplink_of_all = f"tls://{host}:{fed.leaf_port}"
    for site in fed.sites[1:]:
        if site in fed.leaves:
            continue
        uplink = fed.leaf_uplinks.get(site, uplink_of_all)
        fed.leaves[site] = LeafNode(site=site, dir=fed.dir / "leaves" / site,
                                    hub_leaf_url=uplink, creds=fed.trust.creds(site), tls=tls)


def start_leaves(fed: EmbeddedFederation, timeout: float = 30.0) -> None:
    """Start every planned leaf and the hub's interest anchors (`cairn.runtime.leafanchor`),
    and wait until each leaf has reached the federation and the anchors are in place."""
    for leaf in fed.leaves.values():
        leaf.start(wait=False)
    anchors = spawn_anchors(fed)
    for leaf in fed.leaves.values():
        leaf.wait_ready(timeout)
        leaf.wait_linked(timeout)
    wait_anchored(anchors, timeout)


ANCHORED = b"anchored "


def spawn_anchors(fed: EmbeddedFederation) -> Process:
    from cairn.runtime import secure
    from cairn.runtime._fedprocs import Process

    assert fed.nats is not None and fed.trust is not None
    # Membership: the federation file's studies to start with, then the coordinator's
    # study events as they come (`cairn.runtime._studywatch`).
    args = [sys.executable, "-m", "cairn.runtime.leafanchor", "--nats-url", fed.nats_url,
            *secure.service_args(fed.trust, fed.hub),
            *(a for s in fed.leaves for a in ("--site", s)),
            "--federation", str(fed.federation_file)]
    log = fed.dir / "logs" / "leaf-anchors.log"
    log.unlink(missing_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=fed._env(),
                                start_new_session=True)
    anchors = Process("leaf-anchors", fed.hub, (), proc, log)
    fed.processes.append(anchors)
    return anchors


def wait_anchored(anchors: Process, timeout: float) -> None:
    """Wait until the anchors subscribed (their log says so).

    Raises:
        Unavailable: they exited, or did not subscribe in time.
    """
    deadline = time.monotonic() + timeout
    while ANCHORED not in anchors.log.read_bytes():
        if anchors.proc.poll() is not None:
            raise Unavailable(f"the leaf interest anchors exited with "
                              f"{anchors.proc.returncode}; see {anchors.log}")
        if time.monotonic() > deadline:
            raise Unavailable(f"the leaf interest anchors did not subscribe in {timeout:g}s; "
                              f"see {anchors.log}")
        time.sleep(0.01)


def restart_leaf(fed: EmbeddedFederation, site: str, timeout: float = 15.0) -> None:
    """Start `site`'s leaf node again on the same ports and config, and note its new pid
    (`cairn up`'s supervisor, after it died). It dials the federation by itself.

    Raises:
        Unavailable: it did not come up (its log says why).
    """
    server = fed.leaves[site].server
    assert server is not None
    server.restart(timeout)
    fed.record()


def stop_leaves(fed: EmbeddedFederation) -> None:
    for leaf in fed.leaves.values():
        leaf.stop()


def leaf_env() -> dict[str, str]:
    """What a parent on its site's leaf node is told: the federation's JetStream domain."""
    from cairn.bus._connection import JS_DOMAIN_ENV
    from cairn.subjects.table import JS_DOMAIN

    return {JS_DOMAIN_ENV: JS_DOMAIN}
