"""The service runner: config, connect with retry, rebuild state, run handlers, health, shutdown.

A service is a class with `name`, `async start(runtime)`, `async stop()` and `ready()`.
`run(["agent", "launcher"], config)` runs several over one connection in one process;
SIGTERM or SIGINT stops them gracefully (in-flight events are finished and acked).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec

from cairn import api, subjects, telemetry
from cairn.bus import Bus, Delivery, Lease, Subscription
from cairn.errors import CairnError, InvalidInput
from cairn.runtime import phases
from cairn.runtime.logs import setup_logging
from cairn.runtime.standby import LEASED, Standby, lease_ttl
from cairn.trust.requests import RAW_REQUEST

T = TypeVar("T")
ApiHandler = Callable[[api.Envelope, subjects.ApiAddress], Awaitable[api.Result]]
log = logging.getLogger("cairn.runtime.service")

SERVICES: dict[str, str] = {
    "coordinator": "cairn.coordinator.service:CoordinatorService",
    "agent": "cairn.agent.service:AgentService",
    "launcher": "cairn.launcher.service:LauncherService",
    "snapshotter": "cairn.snapshotter.service:SnapshotterService",
    "validator": "cairn.validator.service:ValidatorService",
    "signer": "cairn.signer.service:SignerService",
    "httpapi": "cairn.httpapi.service:HttpApiService",
    "simsite": "cairn.runtime.simsite:SimulatedSiteService",
}

SERVICE_OPTIONS: dict[str, dict[str, str]] = {
    "coordinator": {
        "site_stale_s": "seconds without a heartbeat before a site is stale (3 heartbeats)",
        "site_lost_s": "seconds without a heartbeat before a site is lost (30)",
        "tick_s": "how often queued jobs and timeouts are looked at (0.5)",
        "evidence_trust": "trust list that gated dispatch checks evidence against",
        "evidence_key": "key that signs dispatch receipts",
        "payload_grace_s": "seconds a job's data-plane payloads outlive it (3600)",
    },
    "agent": {},
    "launcher": {},
    "simsite": {
        "simsite_run_s": "seconds each simulated worker runs before it exits 0 (0)",
        "simsite_worker_reports": "on | off: simulated workers connect and report (on)",
    },
    "snapshotter": {
        "snapshot_interval_s": "seconds between scheduled snapshots (3600)",
        "snapshot_inline_max_bytes": "largest snapshot sent inline, not via the object store",
        "snapshot_initial_delay_s": "seconds before the first snapshot (1)",
        "snapshot_collect": "local | jobs: where node facts are collected",
        "snapshot_readings": "JSON file of extra readings merged into each node's",
        "actor": "who the snapshotter's own requests are made as",
        "node_name": "the node name recorded for local collection",
    },
    "validator": {
        "actor": "who the validator's check jobs are submitted as",
        "catalog": "the recipe catalog directory",
    },
    "signer": {
        "evidence_key": "key that signs evidence (made under the state dir when absent)",
        "evidence_cosign_key": "a second key that co-signs every envelope",
        "evidence_trust": "trust list submitted bundles are checked against",
    },
    "httpapi": {
        "listen": "host:port the HTTP API listens on (127.0.0.1:8470; port 0: any free one)",
        "tls_cert": "certificate to serve HTTPS with (with tls_key)",
        "tls_key": "key of tls_cert",
        "client_ca": "with HTTPS: accept client certificates of this CA (mutual TLS)",
        "revoked": "the authority's revoked.json: refuse revoked callers",
        "catalog": "the recipe catalog directory",
        "evidence_trust": "trust list recipes' evidence is counted against",
    },
}
"""The `-O key=value` options each service reads (key -> what it sets): `cairn run` refuses
any other, so a misspelt option is an error rather than a default silently kept. A unit test
holds this table to the keys the services' code reads."""


LEASE_OPTIONS: dict[str, str] = {
    "lease_ttl_s": "seconds a lease outlives its holder's last renewal (3): the standby's "
                   "takeover time (coordinator, validator, signer)",
}
"""The options the runner itself reads for the leased services (`cairn.runtime.standby`)."""


def check_options(services: Sequence[str], options: Sequence[str]) -> dict[str, str]:
    """The `-O KEY=VALUE` items as a mapping, each key one that a service of `services` reads.

    Raises:
        InvalidInput: an item without `=`, or a key none of them reads (naming the known ones).
    """
    known = {k for name in services for k in SERVICE_OPTIONS.get(name, {})}
    if LEASED.intersection(services):
        known |= set(LEASE_OPTIONS)
    parsed: dict[str, str] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{item!r}: write -O KEY=VALUE", field="-O")
        if key not in known:
            names = ", ".join(sorted(known)) or "none"
            raise InvalidInput(f"unknown option {key!r} for {'+'.join(services)}; the options "
                               f"they read: {names}", field="-O")
        parsed[key] = value
    return parsed


@dataclass
class ServiceConfig:
    """Everything a service is told; from flags, else the environment, else defaults."""

    nats_url: str = "nats://127.0.0.1:4222"
    site: str = "hub"
    site_config: str | None = None
    federation: str | None = None
    state_dir: str | None = None
    creds: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    heartbeat_s: float = 1.0
    log_level: str = "info"
    log_format: str = "text"
    options: dict[str, str] = field(default_factory=dict)

    def tls_context(self) -> Any:
        from cairn.runtime.context import tls_context

        return tls_context(self.tls_ca, self.tls_cert, self.tls_key)


class Service(Protocol):
    """A service. It may also have `prepare()`: called before the runner connects, to
    begin (or do) what its `start` needs that needs no bus."""

    name: ClassVar[str]

    async def start(self, runtime: Runtime) -> None: ...

    async def stop(self) -> None: ...

    def ready(self) -> bool: ...


class Runtime:
    """What a running service gets: the bus, its config, and tracked consumers and tasks."""

    def __init__(self, bus: Bus, config: ServiceConfig, site: str) -> None:
        self.bus = bus
        self.config = config
        self.site = site
        self.started = time.monotonic()
        self._subscriptions: list[Subscription[Any]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._core_subs: list[Any] = []
        self.leases: dict[str, Lease] = {}
        """Service kind -> its lease, for the leased services of this process."""

    def fence(self, service: str) -> dict[str, str]:
        """The headers a decision of `service` carries (its lease term); empty where the
        service runs without one.

        Raises:
            LeaseLost: the service's lease is not valid now: it must not act.
        """
        lease = self.leases.get(service)
        return {} if lease is None else lease.headers()

    async def consume(self, *, stream: str, durable: str, filters: Sequence[str],
                      decoder: msgspec.json.Decoder[T],
                      handler: Callable[[T, Delivery], Awaitable[None]],
                      **options: Any) -> Subscription[T]:
        sub: Subscription[T] = Subscription(self.bus, stream=stream, durable=durable,
                                            filters=filters, decoder=decoder,
                                            handler=handler, **options)
        await sub.start()
        self._subscriptions.append(sub)
        return sub

    @property
    def subscriptions(self) -> tuple[Subscription[Any], ...]:
        return tuple(self._subscriptions)

    async def serve(self, subject: str, handler: Callable[[Any], Awaitable[bytes]],
                    queue: str = "") -> None:
        self._core_subs.append(await self.bus.serve(subject, handler, queue=queue))

    async def serve_api(self, subject: str, handler: ApiHandler, queue: str = "") -> None:
        """Answer typed requests on `subject` (a pattern under `cairn.api`): each is decoded
        once into an `Envelope`, checked against the subject it came on, and `handler`'s
        `Result` (or the `CairnError` it raises) is the reply."""

        async def on_request(msg: Any) -> bytes:
            # What a signature is checked over: the bytes as they arrived, never re-encoded.
            token = RAW_REQUEST.set(bytes(msg.data or b""))
            try:
                return await answer(msg)
            finally:
                RAW_REQUEST.reset(token)

        async def answer(msg: Any) -> bytes:
            address = subjects.parse_api(msg.subject)
            envelope = api.decode_envelope(msg.data or b"", verb=address.verb,
                                           study=address.study)
            request = envelope.request
            telemetry.annotate(**{
                "cairn.request": address.verb, "cairn.actor": envelope.actor,
                "cairn.study": envelope.study or address.study,
                "cairn.site": address.site or _str_field(request, "site"),
                "cairn.job": _str_field(request, "job")})
            result = await handler(envelope, address)
            telemetry.annotate(**{"cairn.job": _str_field(result, "job")})  # a submit's new id
            return api.encode_result(result)

        await self.serve(subject, on_request, queue=queue)

    async def subscribe_core(self, subject: str, cb: Callable[[Any], Awaitable[None]]) -> None:
        self._core_subs.append(await self.bus.subscribe_core(subject, cb))

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task that is cancelled on shutdown; a crash is logged, not lost."""
        task = asyncio.create_task(_logged(coro, name), name=name)
        self._tasks.append(task)
        return task

    async def close(self) -> None:
        for sub in self._core_subs:
            try:
                await sub.unsubscribe()
            except Exception:
                pass
        await asyncio.gather(*(s.stop() for s in self._subscriptions))
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # Bounded: a task that swallows its cancel must not hold the process forever.
            _, pending = await asyncio.wait(self._tasks, timeout=5.0)
            for task in pending:
                log.warning("task %s did not stop on cancel; leaving it", task.get_name())


def _str_field(request: object, name: str) -> str | None:
    value = getattr(request, name, None)
    return value if isinstance(value, str) and value else None


async def _logged(coro: Coroutine[Any, Any, Any], name: str) -> Any:
    try:
        return await coro
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("task %s crashed", name)
        raise


def load_service(name: str, config: ServiceConfig) -> Service:
    target = SERVICES.get(name)
    if target is None:
        raise CairnError(f"unknown service {name!r}; known: {', '.join(SERVICES)}")
    module_name, cls_name = target.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    service: Service = cls(config)
    return service


async def run(names: Sequence[str], config: ServiceConfig,
              stop: asyncio.Event | None = None, started: asyncio.Event | None = None) -> int:
    """Run services until `stop` is set or SIGTERM/SIGINT arrives. Returns an exit code.
    `started` is set once every service has started (or the run ended before)."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    label = "+".join(names)
    phases.mark("parent.start", services=label, site=config.site)
    telemetry.setup(f"cairn-{label}", site=config.site)
    services = [load_service(n, config) for n in names]
    for service in services:
        # What a service can begin before the bus is there (its own blocking probes, its
        # heavy imports) runs while this process connects.
        prepare = getattr(service, "prepare", None)
        if callable(prepare):
            prepare()
    ttl_s = lease_ttl(config)
    site = config.site
    t0 = time.monotonic()
    bus = await _connect(config, label, stop)
    if bus is None:
        return 0
    phases.mark("parent.connected", services=label, site=site)
    runtime = Runtime(bus, config, site)
    begun: list[Service] = []

    async def begin(service: Service) -> None:
        await service.start(runtime)
        begun.append(service)
        await runtime.serve(subjects.health(service.name, site), _health(service, runtime))
        phases.mark("parent.service", service=service.name, site=site)

    standby = Standby(runtime, begin, ttl_s)
    code = 0
    try:
        await bus.ensure_federation()
        phases.mark("parent.federation", services=label, site=site)
        for service in services:
            if service.name in LEASED:
                # Once per federation: it starts only while this process holds its lease.
                await standby.start(service, stop)
            else:
                await begin(service)
        log.info("ready in %.3fs: %s at site %s", time.monotonic() - t0, label, site)
        phases.mark("parent.ready", services=label, site=site)
        if started is not None:
            started.set()
        lost = asyncio.ensure_future(bus.lost.wait())
        lease_lost = asyncio.ensure_future(standby.lost.wait())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({lost, lease_lost, stopping}, return_when=asyncio.FIRST_COMPLETED)
        for waiter in (lost, lease_lost, stopping):
            waiter.cancel()
        if bus.lost.is_set():
            log.error("the server closed the connection (%s): exiting, for the supervisor to "
                      "start %s again with a fresh one", bus.lost_reason, label)
            code = 7
        elif standby.lost.is_set():
            log.error("a lease of %s is gone (another instance is active): exiting, for the "
                      "supervisor to start it again as a standby", label)
            code = 7
        log.info("stopping %s", label)
    finally:
        for service in reversed(begun):
            try:
                await service.stop()
            except Exception:
                log.exception("stopping %s failed", service.name)
        await runtime.close()
        await standby.release()
        await bus.close()
        telemetry.shutdown()
    return code


async def _connect(config: ServiceConfig, label: str, stop: asyncio.Event) -> Bus | None:
    connect = asyncio.ensure_future(Bus.connect(
        config.nats_url, name=f"cairn-{label}@{config.site}", tls=config.tls_context(),
        creds=config.creds, retry_for=float("inf")))
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({connect, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if connect in done:
        stopper.cancel()
        return connect.result()
    connect.cancel()
    return None


def _health(service: Service, runtime: Runtime) -> Callable[[Any], Awaitable[bytes]]:
    async def answer(_msg: Any) -> bytes:
        status: dict[str, Any] = {"ok": True, "service": service.name, "site": runtime.site,
                                  "ready": service.ready(), "pid": os.getpid(),
                                  "uptime_s": round(time.monotonic() - runtime.started, 3)}
        extra = getattr(service, "health", None)
        if callable(extra):
            status.update(extra())
        # A durable consumer made again after it disappeared (see `cairn.bus._consume`).
        status["consumers_recreated"] = sum(s.recreated for s in runtime.subscriptions)
        return msgspec.json.encode(status)

    return answer


def parse_args(argv: Sequence[str]) -> tuple[list[str], ServiceConfig]:
    env = os.environ
    p = argparse.ArgumentParser(prog="cairn run", description="Run Cairn services in one process.")
    p.add_argument("services", nargs="+", choices=sorted(SERVICES), metavar="SERVICE",
                   help=f"one or more of: {', '.join(SERVICES)}")
    p.add_argument("--nats-url", default=env.get("CAIRN_NATS_URL"))
    p.add_argument("--site", default=env.get("CAIRN_SITE"))
    p.add_argument("--site-config", default=env.get("CAIRN_SITE_CONFIG"),
                   help="site.yaml (agent, launcher, snapshotter)")
    p.add_argument("--federation", default=env.get("CAIRN_FEDERATION"),
                   help="federation.yaml (coordinator: seeds it on first start)")
    p.add_argument("--state-dir", default=env.get("CAIRN_STATE_DIR"))
    p.add_argument("--creds", default=env.get("CAIRN_CREDS"))
    p.add_argument("--tls-ca", default=env.get("CAIRN_TLS_CA"))
    p.add_argument("--tls-cert", default=env.get("CAIRN_TLS_CERT"))
    p.add_argument("--tls-key", default=env.get("CAIRN_TLS_KEY"))
    p.add_argument("--heartbeat", type=float, default=float(env.get("CAIRN_HEARTBEAT_S", "1")))
    p.add_argument("--log-level", default=env.get("CAIRN_LOG_LEVEL", "info"))
    p.add_argument("--log-format", choices=["text", "json"],
                   default=env.get("CAIRN_LOG_FORMAT", "text"))
    p.add_argument("--option", "-O", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(list(argv))
    site = a.site
    nats_url = a.nats_url
    if a.site_config and (site is None or nats_url is None):
        from cairn.spec.site import load_site_config

        site_cfg = load_site_config(a.site_config)
        site = site or site_cfg.site
        nats_url = nats_url or site_cfg.federation
    config = ServiceConfig(
        nats_url=nats_url or "nats://127.0.0.1:4222", site=site or "hub",
        site_config=a.site_config, federation=a.federation, state_dir=a.state_dir,
        creds=a.creds, tls_ca=a.tls_ca, tls_cert=a.tls_cert, tls_key=a.tls_key,
        heartbeat_s=a.heartbeat, log_level=a.log_level, log_format=a.log_format,
        options=check_options(a.services, a.option))
    return list(dict.fromkeys(a.services)), config


def main(argv: Sequence[str] | None = None) -> int:
    """`cairn run SERVICE...` and `python -m cairn.<service>`."""
    try:
        names, config = parse_args(sys.argv[1:] if argv is None else argv)
        setup_logging(config.log_level, config.log_format, "+".join(names), config.site)
        return asyncio.run(run(names, config))
    except CairnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
