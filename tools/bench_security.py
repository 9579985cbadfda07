"""Security benchmarks: what TLS and broker authorization cost on Cairn's own path, how fast
signed requests verify, and `cairn up --check` / submit -> first line with security on.
Run through `make bench` (tools/bench.py --only security)."""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from cairn import api, subjects
from cairn.bus import Bus
from cairn.runtime.natsserver import NatsServer
from cairn.trust.requests import MemoryNonces, RequestSigner, RequestVerifier

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # run as a script: make `tools.*` importable

from tools._secure_bench import FEDERATION, secure_server, server_tls  # noqa: E402

PAYLOAD = b'{"type":"deployment.accepted","pad":"' + b"x" * 200 + b'"}'


async def _publish_rate(bus: Bus, n: int, pipelined: bool) -> float:
    """Events per second stored by JetStream (with acks), as a site publishes them."""
    subject = subjects.job_site("demo", "j-bench", "site-a", "accepted")
    t0 = time.perf_counter()
    if pipelined:
        futures = [await bus.js.publish_async(subject, PAYLOAD, headers={"Nats-Msg-Id": f"p{i}"})
                   for i in range(n)]
        await asyncio.wait_for(bus.js.publish_async_completed(), 60)
        assert all(f.done() for f in futures)
    else:
        for i in range(n):
            await bus.publish_bytes(subject, PAYLOAD, msg_id=f"s{i}-{time.time_ns()}")
    return n / (time.perf_counter() - t0)


async def bus_throughput(n: int = 2000, rounds: int = 5) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, secure_server(Path(tmp)) as (locked, trust):
        root = Path(tmp)
        plain = NatsServer(root / "plain").start()
        # TLS alone (no authorization), to tell what each layer costs.
        tls_only = NatsServer(root / "tls")
        conf = root / "tls.conf"
        server = trust.dir / "server"
        conf.write_text(f'listen: "127.0.0.1:{tls_only.port}"\nhttp: "127.0.0.1:'
                        f'{tls_only.monitor_port}"\njetstream {{ store_dir: "{root / "tls"}" }}\n'
                        f'tls {{ cert_file: "{server / "server.pem"}", key_file: '
                        f'"{server / "server.key"}" }}\n')
        tls_only.config_file = conf
        tls_only.start()
        try:
            open_bus = await Bus.connect(plain.url, name="bench-plain")
            await open_bus.ensure_study("demo")
            tls_bus = await Bus.connect(tls_only.url, name="bench-tls", tls=server_tls(trust))
            await tls_bus.ensure_study("demo")
            site_bus = await Bus.connect(locked.url, name="bench-site",
                                         creds=str(trust.creds("site-a")),
                                         tls=server_tls(trust))
            rates: dict[str, list[float]] = {}
            buses = {"plain": open_bus, "tls": tls_bus, "secure": site_bus}
            for _ in range(rounds):  # interleaved, so load on the machine hits all alike
                for name, bus in buses.items():
                    rates.setdefault(f"{name}_acked", []).append(
                        await _publish_rate(bus, n // 4, False))
                    rates.setdefault(f"{name}_pipelined", []).append(
                        await _publish_rate(bus, n, True))
            for bus in buses.values():
                await bus.close()
        finally:
            tls_only.stop()
            plain.stop()
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "js_publish_acked_per_s_plain": round(med["plain_acked"]),
        "js_publish_acked_per_s_secure": round(med["secure_acked"]),
        "js_publish_acked_ratio": round(med["secure_acked"] / med["plain_acked"], 3),
        "js_publish_acked_ratio_tls_only": round(med["tls_acked"] / med["plain_acked"], 3),
        "js_publish_pipelined_per_s_plain": round(med["plain_pipelined"]),
        "js_publish_pipelined_per_s_secure": round(med["secure_pipelined"]),
        "js_publish_pipelined_ratio": round(med["secure_pipelined"] / med["plain_pipelined"],
                                            3),
        "js_publish_pipelined_ratio_tls_only": round(med["tls_pipelined"] /
                                                     med["plain_pipelined"], 3),
    }


def signed_requests(n: int = 2000) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        fed_file = Path(tmp) / "federation.yaml"
        fed_file.write_text(yaml.safe_dump(FEDERATION))
        from cairn.spec.federation import load_federation
        from cairn.trust.provision import provision

        out = Path(tmp) / "trust"
        provision(load_federation(fed_file), out, url="tls://127.0.0.1:1",
                  hosts=["127.0.0.1"], port=1)
        signer = RequestSigner.from_creds(out / "kits" / "admin@coord" / "admin.creds")
        # In memory: the signature and credential checks alone (the durable nonce check is
        # the `nonces` section).
        verifier = RequestVerifier.from_kit(out / "kits" / "hub" / "hub.creds", MemoryNonces())
        request = api.JobList()
        t0 = time.perf_counter()
        payloads = [signer.sign(api.Envelope(request=request, actor="admin@coord",
                                             study="demo")) for _ in range(n)]
        signed = n / (time.perf_counter() - t0)
        envelopes = [api.decode_envelope(raw, verb="jobs", study="demo") for raw in payloads]

        async def verify_all() -> float:
            t0 = time.perf_counter()
            for raw, env in zip(payloads, envelopes, strict=True):
                await verifier.verify(raw, env, study="demo")
            return n / (time.perf_counter() - t0)

        verified = asyncio.run(verify_all())
    return {"requests_signed_per_s": round(signed), "requests_verified_per_s": round(verified)}


def authority_decisions(n: int = 400) -> dict[str, Any]:
    """The authority's decision per connect, in process: a site's credential checked back
    to the root, its proof of the key, and its permissions derived from the subject table
    for a federation of 20 studies (first decision, and decisions once its rights are
    known: the derivation is cached per identity and membership)."""
    import base64

    from cairn.trust.authority import Authorizer
    from cairn.trust.credentials import Identity, Kind, issue
    from cairn.trust.nkeyjwt import KeyKind, encode_jwt, new_seed, public_key, sign
    from cairn.trust.permissions import Membership

    root, issuer, server = (new_seed(KeyKind.OPERATOR), new_seed(KeyKind.ACCOUNT),
                            new_seed(KeyKind.SERVER))
    studies = {f"s{i}": Membership(sites=frozenset({"site-a", f"site-{i}"}),
                                   admins=frozenset({"alice@org-a"})) for i in range(20)}

    def request(seed: str, token: str, nonce: str) -> str:
        sig = base64.b64encode(sign(seed, nonce.encode())).decode()
        return encode_jwt({"sub": public_key(issuer), "aud": "nats-authorization-request",
                           "exp": int(time.time()) + 60,
                           "nats": {"server_id": {"id": public_key(server)},
                                    "user_nkey": "UCONN", "client_info": {"id": 1,
                                                                          "nonce": nonce},
                                    "connect_opts": {"auth_token": token, "sig": sig},
                                    "type": "authorization_request", "version": 2}}, server)

    auth = Authorizer(roots=frozenset({public_key(root)}), issuer_seed=issuer,
                      membership=studies)
    cold, warm = [], []
    for i in range(n):
        seed = new_seed(KeyKind.USER)
        name = f"site-{i % 40}"
        token = issue(Identity(kind=Kind.SITE, name=name, site=name), public_key(seed), root)
        req = request(seed, token, f"nonce-{i}")
        t0 = time.perf_counter()
        decision = auth.decide(req)
        (cold if i < 40 else warm).append((time.perf_counter() - t0) * 1000)
        assert decision.connection is not None, decision.reason
    warm.sort()
    return {"authority_decide_ms_p50": round(statistics.median(warm), 3),
            "authority_decide_ms_p99": round(warm[int(len(warm) * 0.99) - 1], 3),
            "authority_decide_ms_first_p50": round(statistics.median(cold), 3)}


async def connect_latency(n: int = 40) -> dict[str, Any]:
    """Connect to a secure server as a site, end to end (TLS handshake, the auth callout,
    the permissions), against TLS alone on a server without the authority."""
    times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, secure_server(Path(tmp)) as (locked, trust):
        for _ in range(n):
            t0 = time.perf_counter()
            bus = await Bus.connect(locked.url, name="bench-connect",
                                    creds=str(trust.creds("site-a")), tls=server_tls(trust))
            times.append((time.perf_counter() - t0) * 1000)
            await bus.close()
    times.sort()
    return {"connect_ms_p50_secure": round(statistics.median(times), 2),
            "connect_ms_p99_secure": round(times[max(0, int(len(times) * 0.99) - 1)], 2)}


def up_check(insecure: bool, runs: int = 3) -> float:
    healthy = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            args = [sys.executable, "-m", "cairn", "up", "--check", "--dir", str(Path(tmp) / "up")]
            done = subprocess.run([*args, *(["--insecure"] if insecure else [])], cwd=tmp,
                                  capture_output=True, text=True, timeout=120, check=True)
        found = re.search(r"in ([\d.]+)s \(", done.stdout)
        assert found, done.stdout
        healthy.append(float(found.group(1)))
    return statistics.median(healthy)


def run() -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(bus_throughput())
    result.update(signed_requests())
    result.update(authority_decisions())
    result.update(asyncio.run(connect_latency()))
    result["up_check_healthy_s_secure"] = up_check(insecure=False)
    result["up_check_healthy_s_insecure"] = up_check(insecure=True)
    from bench_control import measure  # secure by default, as `cairn up`

    control = asyncio.run(measure(samples=5))
    result["submit_to_first_line_s_p50_secure"] = control["submit_to_first_line_s_p50"]
    result["targets"] = {"js_publish_acked_ratio": 0.85, "up_check_healthy_s": 1.0,
                         "submit_to_first_line_s": 0.15}
    result["note"] = ("ratios are secure/plain in the same run, interleaved; secure = TLS + "
                      "auth callout permissions, a site identity publishing on its own subject")
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(asyncio.run(bus_throughput()) | signed_requests(), indent=1))
