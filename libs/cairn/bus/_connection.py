"""The Bus: one NATS connection with JetStream, and everything Cairn does with it."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoRespondersError, NoServersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import (
    APIError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)

from cairn import api, subjects, telemetry
from cairn.bus import _lazyws
from cairn.bus._connecting import Callbacks, connected_or_refused, probe
from cairn.bus._consumers import ConsumerNames
from cairn.bus._reconnects import end_reconnecting
from cairn.bus._replicas import configured_replicas
from cairn.bus._streams import ensure_stream
from cairn.errors import CairnError, NotFound, Timeout, Unavailable
from cairn.events import Event, encode
from cairn.subjects import StreamSpec
from cairn.subjects.table import js_api

log = logging.getLogger("cairn.bus")


def _not_ssl_eof_noise(record: logging.LogRecord) -> bool:
    # asyncio warns on every TLS connection the server closes ("returning true from
    # eof_received() has no effect when using ssl"): harmless, and it would be on every
    # line of a secure federation's output.
    return "eof_received()" not in record.getMessage()


logging.getLogger("asyncio").addFilter(_not_ssl_eof_noise)

MSG_ID = "Nats-Msg-Id"
JS_DOMAIN_ENV = "CAIRN_JS_DOMAIN"
"""Set (to `cairn.subjects.table.JS_DOMAIN`) for a parent connected to its site's leaf node."""
CONTENT_TYPE = "Content-Type"
JSON = "application/json"
MSGPACK = "application/msgpack"
"""Every message Cairn sends says what its payload is (docs/events.md): JSON for events,
requests and replies, MessagePack for data-plane envelopes."""
_FORMING = frozenset({10005, 10008, 10009, 10023, 10118, 10158})
"""JetStream's answers while a cluster forms or elects: no suitable peers for placement yet,
JetStream temporarily unavailable, not the leader, insufficient resources, stream offline;
and, to a publish asked again after its answer timed out, "duplicate message id is in
process" (the first attempt is still being replicated: asked again later, the same id gets
its ack, or is stored once)."""
_RETRYABLE = (NatsTimeout, NoRespondersError, NoStreamResponseError, ServiceUnavailableError,
              ConnectionClosedError, asyncio.TimeoutError, OSError)


class NoResponders(Unavailable):
    """Nothing was subscribed on a request's subject when it was published: the server
    dropped it, so nothing received it (asking again cannot apply it twice)."""


class Bus:
    """A connection to the federation's NATS server (the only holder of a `nats` client)."""

    def __init__(self, nc: Client, *, name: str = "cairn") -> None:
        self.nc = nc
        # On a site's leaf node the federation's JetStream is named by its domain
        # (`cairn.runtime.leaf`); elsewhere the server's own is the federation's.
        self.js_domain = os.environ.get(JS_DOMAIN_ENV) or None
        if self.js_domain is None:
            self.js = nc.jetstream(timeout=5.0)
        else:
            from cairn.bus._domain import DomainJetStream

            self.js = DomainJetStream(nc, domain=self.js_domain, timeout=5.0)
        self.name = name
        self._ensured: set[str] = set()
        self._batch = telemetry.ProducerBatch()
        self.creds: str | None = None
        """The credentials file this connection authenticated with (requests are signed
        with its key); None on an insecure federation."""
        self.consumer_names = ConsumerNames()
        """The consumer names this connection's identity owns (see `cairn.bus._consumers`)."""
        self.lost = asyncio.Event()
        """Set when the server closed the connection for good (nats-py does not reconnect
        after, e.g., an expired user JWT): a service exits and its supervisor restarts it."""
        self.lost_reason = ""
        self.refusals: collections.deque[str] = collections.deque(maxlen=64)
        """The server's latest permission violations, lowercased (it sends them on the side,
        and a refused request otherwise just goes unanswered)."""
        self.reconnect_listeners: list[Callable[[], None]] = []
        """Called after every reconnect (rights may have changed: e.g. a study joined)."""
        self.awaiting_rights: set[str] = set()
        """Subjects (lowercased, as nats-py passes refusals on) subscribed ahead of the
        rights that will name them: see `subscribe_core`."""
        self._closing = False
        self.replicas = configured_replicas()
        """Copies of each stream, bucket and object store this connection creates
        (`cairn.bus._replicas`)."""

    def api_subject(self, subject: str) -> str:
        """A `$JS.API` subject as this connection sends it (under the federation's domain
        on a leaf node)."""
        if self.js_domain is None:
            return subject
        from cairn.subjects.table import js_domain_api

        return js_domain_api(subject)

    # -- connecting ---------------------------------------------------------------------

    @classmethod
    async def connect(cls, url: str | list[str], *, name: str = "cairn",
                      tls: ssl.SSLContext | None = None, creds: str | None = None,
                      connect_timeout: float = 2.0, retry_for: float = 0.0,
                      on_event: Callable[[str], None] | None = None,
                      nkey_seed: str | None = None) -> Bus:
        """Connect, retrying with backoff for up to `retry_for` seconds.

        Once connected, the client reconnects by itself forever: a restarted server is
        picked up without the caller doing anything.

        `creds` is a Cairn credentials file (see `cairn.trust`): its JWT also travels as the
        connect token for the federation's authority, and replies come to an inbox named by
        the credential's key, which only this connection may read. `nkey_seed` is a file
        with a bare nkey seed (the authority's own static users).
        """
        configured_replicas()  # a bad $CAIRN_REPLICAS is told before anything connects
        auth: dict[str, Any] = {}
        if creds is not None:
            from cairn.trust.connect import creds_options

            auth = creds_options(creds)
        elif nkey_seed is not None:
            auth = {"nkeys_seed": nkey_seed}
        # "tls://a:4222,tls://b:4222": every server of a cluster, to fail over between.
        servers = ([u.strip() for u in url.split(",") if u.strip()] if isinstance(url, str)
                   else list(url))
        _lazyws.enable_websockets(servers)
        deadline = time.monotonic() + retry_for
        delay = 0.05

        calls = Callbacks(servers, on_event)

        while True:
            try:
                # nats.connect retries an unreachable first server forever when reconnects
                # are allowed: probe it first, and bound the handshake.
                await probe(servers, connect_timeout)
                options: dict[str, Any] = {
                    "name": name, "tls": tls, **auth,
                    "connect_timeout": int(max(1, connect_timeout)), "allow_reconnect": True,
                    "max_reconnect_attempts": -1, "reconnect_time_wait": 0.25,
                    **calls.options(), "pending_size": 64 * 1024 * 1024}
                client = Client()  # ours to close if it never connects (`nats.connect`'s is not)
                connecting = asyncio.ensure_future(client.connect(servers, **options))
                nc = await connected_or_refused(client, connecting, calls.refusal,
                                                connect_timeout + 3.0)
                if nc is None:
                    if time.monotonic() >= deadline:
                        raise calls.refused[-1]
                    # A service waits out an authority that is (re)starting.
                    log.warning("%s; retrying", calls.refused[-1])
                    calls.refusal.clear()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                bus = cls(nc, name=name)
                calls.bus = bus
                bus.creds = creds
                if creds is not None:
                    from cairn.trust.connect import consumer_names

                    owner, names = consumer_names(creds)
                    bus.consumer_names = ConsumerNames(owner=owner, names=names)
                return bus
            except (TimeoutError, NoServersError, OSError, NatsTimeout) as exc:
                if time.monotonic() >= deadline:
                    raise Unavailable(f"cannot reach NATS at {', '.join(servers)}: {exc}") from None
                log.info("waiting for NATS at %s (%s)", ", ".join(servers), exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def close(self) -> None:
        """Flush what is buffered and close (acks included); what stopped consumers were
        handed goes back first."""
        from cairn.bus._pull import release  # imports this module

        self._closing = True
        if self.nc.is_closed:
            await end_reconnecting(self.nc)
            return
        await release(self)
        try:
            await self.nc.flush(timeout=2)
        except Exception:
            pass
        await self.nc.close()
        await end_reconnecting(self.nc)

    @property
    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    # -- streams and buckets ------------------------------------------------------------

    async def ensure(self, *specs: StreamSpec) -> None:
        """Make sure each stream exists with Cairn's configuration (cached per process).

        An identity with restricted rights (a site, an admin, a worker) makes no stream: a
        stream's creator chooses its subjects, so the authority makes them for everyone.
        """
        if self.consumer_names.restricted:
            return
        for spec in specs:
            if spec.name in self._ensured:
                continue
            await self._retry(partial(ensure_stream, self.js, spec, self.replicas),
                              what=f"stream {spec.name}")
            self._ensured.add(spec.name)

    async def ensure_federation(self) -> None:
        await self.ensure(*subjects.GLOBAL_STREAMS)

    async def ensure_study(self, study: str) -> None:
        await self.ensure(subjects.study_stream(study), subjects.data_stream(study),
                          subjects.files_stream(study))

    async def ensure_site(self, site: str) -> None:
        await self.ensure(subjects.site_stream(site))

    async def stream_names(self, prefix: str = "") -> list[str]:
        # STREAM.NAMES, not STREAM.LIST: names only, so a site allowed to list them learns
        # no other stream's configuration.
        names: list[str] = []
        offset = 0
        while True:
            msg = await self.nc.request(self.api_subject(js_api("STREAM", "NAMES")),
                                        msgspec.json.encode({"offset": offset}), timeout=5.0)
            page = msgspec.json.decode(msg.data)
            found = [n for n in page.get("streams") or [] if isinstance(n, str)]
            names += [n for n in found if n.startswith(prefix)]
            offset += len(found)
            if not found or offset >= int(page.get("total", 0)):
                return sorted(names)

    async def get_message(self, stream: str, seq: int) -> tuple[str, dict[str, str], bytes]:
        """One stored message by sequence: (subject, headers, data)."""
        try:
            msg = await self.js.get_msg(stream, seq)
        except NotFoundError:
            raise NotFound(f"no message {seq} in stream {stream}") from None
        return str(msg.subject or ""), dict(msg.headers or {}), bytes(msg.data or b"")

    async def last_message(self, stream: str, subject: str
                           ) -> tuple[str, dict[str, str], bytes] | None:
        """The last stored message on `subject` (subject, headers, data), or None."""
        try:
            msg = await self.js.get_last_msg(stream, subject, direct=True)
        except NotFoundError:
            return None
        return str(msg.subject or ""), dict(msg.headers or {}), bytes(msg.data or b"")

    async def delete_message(self, stream: str, seq: int) -> None:
        try:
            await self.js.delete_msg(stream, seq)
        except NotFoundError:
            raise NotFound(f"no message {seq} in stream {stream}") from None

    # -- publishing ---------------------------------------------------------------------

    def _headers(self, subject: str, msg_id: str, extra: dict[str, str] | None,
                 event: Event | None = None, content_type: str = JSON
                 ) -> tuple[dict[str, str], Any]:
        span, trace_headers = telemetry.start_producer(subject, msg_id, event)
        headers = {MSG_ID: msg_id, CONTENT_TYPE: content_type, **trace_headers}
        if extra:
            headers.update(extra)
        return headers, span

    async def publish(self, event: Event, *, subject: str | None = None,
                      headers: dict[str, str] | None = None, timeout: float = 30.0) -> int:
        """Publish one event and wait for JetStream to store it; returns its stream sequence.

        Retries through a server restart until `timeout`: the event id is the message id,
        so a retry that the server already stored is dropped as a duplicate.
        """
        subject = subject or subjects.subject_of(event)
        return await self.publish_bytes(subject, encode(event), msg_id=event.id,
                                        headers=headers, timeout=timeout, event=event)

    async def publish_bytes(self, subject: str, payload: bytes, *, msg_id: str,
                            headers: dict[str, str] | None = None,
                            timeout: float = 30.0, event: Event | None = None,
                            content_type: str = JSON) -> int:
        hdrs, span = self._headers(subject, msg_id, headers, event, content_type)
        try:
            ack = await self._retry(
                lambda: self.js.publish(subject, payload, timeout=2.0, headers=hdrs),
                what=f"publish to {subject}", budget=timeout)
            return int(ack.seq)
        finally:
            if span is not None:
                span.end()

    async def publish_async(self, event: Event, *,
                            subject: str | None = None) -> asyncio.Future[Any]:
        """Publish without waiting for the store's answer (await `flush_publishes` later).

        Pipelined publishes share one PRODUCER span per batch (see `telemetry.ProducerBatch`).
        """
        subject = subject or subjects.subject_of(event)
        headers = {MSG_ID: event.id, CONTENT_TYPE: JSON, **self._batch.headers(subject)}
        future: asyncio.Future[Any] = await self.js.publish_async(subject, encode(event),
                                                                  headers=headers)
        return future

    async def flush_publishes(self, timeout: float = 30.0) -> None:
        try:
            await asyncio.wait_for(self.js.publish_async_completed(), timeout)
        finally:
            self._batch.end()

    async def publish_core(self, subject: str, payload: bytes,
                           headers: dict[str, str] | None = None,
                           content_type: str = JSON) -> None:
        """Publish without storage (heartbeats, data-plane fan-out)."""
        await self.nc.publish(subject, payload,
                              headers={CONTENT_TYPE: content_type, **(headers or {})})

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts, in bytes (its `max_payload`)."""
        return int(self.nc.max_payload)

    # -- request / reply ----------------------------------------------------------------

    async def request(self, subject: str, payload: bytes, *, timeout: float = 5.0,
                      headers: dict[str, str] | None = None) -> bytes:
        hdrs = {CONTENT_TYPE: JSON, **telemetry.current_headers(), **(headers or {})}
        try:
            msg = await self._ask(subject, payload, timeout, hdrs)
        except NoRespondersError:
            raise NoResponders(f"nothing answers on {subject}: is the service running?") from None
        except ConnectionClosedError:
            raise Unavailable(f"the connection to NATS is closed; {subject} was not asked") \
                from None
        except (TimeoutError, NatsTimeout):
            raise Timeout(f"no answer on {subject} within {timeout:g}s") from None
        return bytes(msg.data)

    async def _ask(self, subject: str, payload: bytes, timeout: float,
                   headers: dict[str, str]) -> Msg:
        """One request, answered on an inbox that names its subject (`reply_inbox`): a
        service behind a leaf node may answer only there."""
        from cairn.subjects.table import reply_inbox

        base, _, token = self.nc.new_inbox().rpartition(".")
        inbox = reply_inbox(base, subject, token)
        sub = await self.nc.subscribe(inbox, max_msgs=1)
        try:
            await self.nc.publish(subject, payload, reply=inbox, headers=headers)
            msg = await sub.next_msg(timeout=timeout)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if msg.headers and msg.headers.get("Status") == "503":
            raise NoRespondersError
        return msg

    async def serve(self, subject: str, handler: Callable[[Msg], Awaitable[bytes]],
                    *, queue: str = "") -> Any:
        """Answer requests on `subject` with `handler`'s reply (errors answered, not raised)."""

        async def on_msg(msg: Msg) -> None:
            try:
                with telemetry.consumer_span(msg.subject, msg.headers, consumer=subject):
                    reply = await handler(msg)
            except CairnError as exc:
                reply = api.encode_error(exc)
            except Exception as exc:
                log.exception("request handler for %s failed", subject)
                reply = api.encode_error(CairnError(f"internal error: {exc}"))
            if msg.reply:
                try:
                    await self.nc.publish(msg.reply, reply, headers={CONTENT_TYPE: JSON})
                except Exception:
                    log.debug("could not answer on %s", subject)

        return await self.nc.subscribe(subject, queue=queue, cb=on_msg)

    async def subscribe_core(self, subject: str, cb: Callable[[Msg], Awaitable[None]], *,
                             ahead: bool = False) -> Any:
        """A plain subscription. `ahead`: this connection's rights may name `subject` only
        once the authority renews it (a study just created: it does within a moment, and
        the client subscribes again then), so a refusal until the next reconnect is
        expected, not warned of; after it, a refusal is a real one."""
        if ahead:
            self.awaiting_rights.add(subject.lower())
        return await self.nc.subscribe(subject, cb=cb)

    # -- retry --------------------------------------------------------------------------

    async def setup(self, call: Callable[[], Awaitable[Any]], *, what: str,
                    budget: float = 30.0) -> Any:
        """`call` (making a stream or bucket, or finding it), asked again for `budget`
        seconds while JetStream does not answer, as while a new cluster elects its leaders.

        Raises:
            Unavailable: it still did not answer after `budget` seconds.
        """
        return await self._retry(call, what=what, budget=budget)

    async def _retry(self, call: Callable[[], Awaitable[Any]], *, what: str,
                     budget: float = 30.0) -> Any:
        deadline = time.monotonic() + budget
        delay = 0.05
        while True:
            try:
                return await call()
            except (*_RETRYABLE, APIError) as exc:
                if isinstance(exc, APIError) and not isinstance(exc, _RETRYABLE) \
                        and exc.err_code not in _FORMING:
                    raise
                if time.monotonic() + delay >= deadline:
                    raise Unavailable(f"{what}: NATS did not answer ({type(exc).__name__})") \
                        from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
