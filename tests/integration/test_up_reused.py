"""`cairn up` on a folder it ran in before: the HTTP API's parent is started first (it builds
its application while the rest starts), and still serves HTTPS to a kit's client certificate
only; every launcher keeps the warm interpreter `cairn up` forked for it; the validator
reads its recipe catalog when a run needs it."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import msgspec
import pytest

from cairn import subjects
from cairn.bus import Bus
from cairn.errors import Unavailable
from cairn.runtime import context, phases
from cairn.runtime.natsserver import find_nats_server
from tests.integration.test_embedded_restart import Up, stop_up, wait_context


def _start_up(dir_: Path, logs: Path, marks: Path) -> Up:
    env = {**os.environ, "CAIRN_CONTEXT": str(logs / "context.yaml"), "CAIRN_PHASES": str(marks)}
    env.pop("CAIRN_NATS_URL", None)
    out, err = logs / "up.out", logs / "up.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "cairn", "up", "--dir", str(dir_),
                                 "--timeout", "120"], stdout=o, stderr=e, text=True, env=env,
                                start_new_session=True)
    return Up(proc, dir_, logs / "context.yaml", err, out)


async def _launchers_warm(ctx: context.Context) -> None:
    """Every site's launcher took the warm interpreter `cairn up` forked for it (the API's
    parent, at the hub's site too, must not have taken the hub's)."""
    assert ctx.creds is not None
    bus = await Bus.connect(ctx.nats_url, name="test", creds=ctx.creds,
                            tls=context.tls_context(ctx.tls_ca, None, None))
    try:
        for site in ctx.sites:
            reply = await bus.request(subjects.health("launcher", site), b"", timeout=10)
            health = msgspec.json.decode(reply)
            assert health["ready"] is True, health
            assert health["warm"]["adopted"] is True, (site, health)
    finally:
        await bus.close()


def _api_serves_kits_only(ctx: context.Context, trust: Path) -> None:
    """A kit's client certificate is its identity; no certificate and no token, nothing."""
    assert ctx.api_url is not None and ctx.api_url.startswith("https://")
    tls = ssl.create_default_context(cafile=str(trust / "ca" / "ca.pem"))
    kit = trust / "kits" / "admin@coord"
    tls.load_cert_chain(str(kit / "client.pem"), str(kit / "client.key"))
    with httpx.Client(base_url=ctx.api_url, verify=tls, timeout=30.0) as admin:
        who = admin.get("/v1/whoami")
        assert who.status_code == 200, who.text
        assert who.json()["name"] == "admin@coord"
    anonymous = ssl.create_default_context(cafile=str(trust / "ca" / "ca.pem"))
    with httpx.Client(base_url=ctx.api_url, verify=anonymous, timeout=30.0) as nobody:
        assert nobody.get("/v1/whoami").status_code == 401


def _api_started_first(marks: Path) -> bool:
    """Whether the API's parent started before `cairn up` imported what workers import."""
    order = [m["phase"] for m in phases.read(marks)
             if m["phase"] == "up.worker_preloaded"
             or (m["phase"] == "parent.start" and m.get("services") == "httpapi")]
    return order[:1] == ["parent.start"]


@pytest.mark.timeout(300)
async def test_up_on_a_used_folder_starts_the_api_first_and_keeps_every_launcher_warm(
        tmp_path: Path) -> None:
    try:
        find_nats_server()
    except Unavailable as exc:
        pytest.skip(str(exc))
    fed = tmp_path / "fed"
    for run in ("fresh", "again"):
        (tmp_path / run).mkdir()
        marks = tmp_path / run / "phases.jsonl"
        up = _start_up(fed, tmp_path / run, marks)
        try:
            ctx = await wait_context(up)
            # Provisioned now: the API's parent after it. Provisioned before: first.
            assert _api_started_first(marks) == (run == "again"), phases.read(marks)
            _api_serves_kits_only(ctx, fed / "trust")
            await _launchers_warm(ctx)
        finally:
            stop_up(up)
        assert up.proc.returncode == 0, up.err()
