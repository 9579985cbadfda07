"""What `cairn up` and an idle site no longer pay for: provisioning again on a folder that
was provisioned for the same federation, nats-py's websocket imports on a tls:// path, and
a snapshot's imports and allocations kept in the site parent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cairn.errors import Unavailable
from cairn.runtime import secure
from cairn.runtime.natsserver import NatsServer
from cairn.snapshotter.service import ChildCollection

FEDERATION = {"federation": "t", "hub": "hub",
              "sites": [{"name": "hub", "org": "coord"}, {"name": "site-a", "org": "org-a"}],
              "admins": [{"name": "admin@coord", "org": "coord", "role": "project_admin"}],
              "studies": {"demo": {"sites": ["hub", "site-a"], "admins": ["admin@coord"]}}}


def _prepare(tmp_path: Path, fed: dict[str, object]) -> secure.Trust:
    (tmp_path / "federation.yaml").write_text(yaml.safe_dump(fed))
    server = NatsServer(tmp_path / "nats", port=14222, monitor_port=18222)
    return secure.prepare(server, tmp_path / "federation.yaml", tmp_path / "trust")


def test_a_folder_provisioned_for_the_same_federation_is_not_provisioned_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trust = _prepare(tmp_path, FEDERATION)
    creds = trust.creds("site-a").read_bytes()
    import cairn.trust.provision as provisioning

    calls: list[object] = []
    real = provisioning.provision
    monkeypatch.setattr(provisioning, "provision",
                        lambda *a, **k: calls.append(a) or real(*a, **k))

    assert _prepare(tmp_path, FEDERATION).creds("site-a").read_bytes() == creds
    assert calls == []  # same file, URL and hosts, every kit there: nothing read or written

    # A kit removed by hand, or a site added: provisioned again, and only what is missing.
    import shutil

    shutil.rmtree(trust.kit("site-a"))
    _prepare(tmp_path, FEDERATION)
    assert len(calls) == 1 and trust.creds("site-a").exists()
    grown = {**FEDERATION, "sites": [*FEDERATION["sites"],  # type: ignore[misc]
                                     {"name": "site-b", "org": "org-b"}]}
    _prepare(tmp_path, grown)
    assert len(calls) == 2 and trust.creds("site-b").exists()
    _prepare(tmp_path, grown)
    assert len(calls) == 2


def test_the_bus_imports_no_websocket_transport_until_a_ws_url_asks() -> None:
    code = ("import sys, cairn.bus, nats.aio.transport as t; "
            "print('aiohttp' in sys.modules, t.aiohttp is None); "
            "from cairn.bus import _lazyws; _lazyws.enable_websockets(['ws://127.0.0.1:1']); "
            "print('aiohttp' in sys.modules, t.aiohttp is not None)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    pytest.importorskip("aiohttp")
    assert done.stdout.split() == ["False", "True", "True", "True"]


def test_a_snapshot_is_collected_in_a_child_and_a_stop_ends_it() -> None:
    child = ChildCollection()
    snap = child.collect("site-a", "node-1")
    assert snap is not None and snap.site == "site-a"
    assert [n.node for n in snap.nodes] == ["node-1"]
    child.stop()
    with pytest.raises(Unavailable):
        child.collect("site-a", "node-1")
