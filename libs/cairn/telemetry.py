"""OpenTelemetry for Cairn: one tracer provider, W3C trace context over NATS headers.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (OTLP/HTTP export, batched) or when
`setup(..., exporter=...)` is given one, unless the sampler can never sample what this
process does (`always_off`, or a parent-based sampler under an unsampled parent): then it
stays off, as cheap as no endpoint at all, and only passes the trace context on. The trace
context travels in W3C `traceparent` and `tracestate` headers, written and read by
OpenTelemetry's W3C propagator (`TraceContextTextMapPropagator`). Off, OpenTelemetry is not
even imported (it costs a parent or a worker tens of milliseconds at start): the trace
headers a message came with are carried unchanged to whatever its handler publishes, through
a context variable.

Span names follow OpenTelemetry's messaging conventions, `<operation> <destination template>`
(`publish cairn.study.{study}.job.{job}.submitted`, `process cairn.api.study.{study}.submit`):
they stay the same from one job, site or study to the next, so a tracing UI's list of
operations does not grow with every job. The concrete subject and the ids are attributes
(`messaging.destination.name`, `cairn.job`, ...).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_exporter: Any = None
SHUTDOWN_TIMEOUT_S = 2.0
"""How long `shutdown` waits for the last spans to go out: a collector that is down or slow
must not hold a worker's (or a command's) exit for the exporter's 10 s of retries."""
_propagator: Any = None
TraceHeaders = dict[str, str]
"""`traceparent` (and `tracestate` when there is one), ready to merge into message headers."""
TRACESTATE_MAX = 512
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_headers(headers: dict[str, str] | None) -> TraceHeaders:
    """Just the W3C trace headers of a message's headers (to keep, and continue later), if
    they are well formed: a `traceparent` of W3C's version-00 form (any other is dropped, and
    its `tracestate` with it) and a `tracestate` of at most `TRACESTATE_MAX` characters (W3C
    asks that 512 be passed on; a longer one is dropped, not carried to every later message).
    """
    headers = headers or {}
    parent = headers.get(TRACEPARENT)
    if not parent or not _TRACEPARENT.fullmatch(parent) or parent[3:35] == "0" * 32 \
            or parent[36:52] == "0" * 16:
        return {}
    out = {TRACEPARENT: parent}
    state = headers.get(TRACESTATE)
    if state and len(state) <= TRACESTATE_MAX and state.isprintable():
        out[TRACESTATE] = state
    return out


def env_headers() -> TraceHeaders:
    """The job's trace context a launcher handed its worker (`TRACEPARENT`, `TRACESTATE`)."""
    return trace_headers({TRACEPARENT: os.environ.get("TRACEPARENT", ""),
                          TRACESTATE: os.environ.get("TRACESTATE", "")})


# With tracing off: the trace headers of the message being handled, passed on to publishes;
# in a worker, the job's (TRACEPARENT, from the launcher) until a message says otherwise.
# The default is never mutated: every change sets a new dict.
_passed_on: ContextVar[TraceHeaders] = ContextVar("cairn_trace_headers",
                                                  default=env_headers())  # noqa: B039


def _w3c() -> Any:
    global _propagator
    if _propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _propagator = TraceContextTextMapPropagator()
    return _propagator


def _headers_of(span: Any) -> TraceHeaders:
    """The W3C headers that make `span` the parent of whatever receives them."""
    from opentelemetry import trace

    carrier: TraceHeaders = {}
    _w3c().inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def _context_of(headers: dict[str, str] | None) -> Any:
    """The OpenTelemetry context a message's W3C headers carry (an empty one if none)."""
    return _w3c().extract(carrier=headers or {})


def never_sampled(parent: TraceHeaders | None = None) -> bool:
    """Would `OTEL_TRACES_SAMPLER` drop every span of a process whose spans all descend from
    `parent` (a worker's, from `TRACEPARENT`)? True for `always_off`, and for a parent-based
    sampler (the default) under a valid parent whose sampled flag is clear."""
    sampler = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    if sampler == "always_off":
        return True
    valid = trace_headers(parent)  # an invalid parent starts a new trace: not "never"
    if not sampler.startswith("parentbased_") or not valid:
        return False
    return not int(valid[TRACEPARENT][-2:], 16) & 1


def _resource(attributes: dict[str, str]) -> Any:
    """`Resource.create(attributes)`, without the thread pool it runs its two default
    detectors in (2 of the 5 CPU-ms a worker's setup takes). Detectors the environment asks
    for (`OTEL_EXPERIMENTAL_RESOURCE_DETECTORS`) go the SDK's way."""
    from opentelemetry.sdk import resources

    default = getattr(resources, "_DEFAULT_RESOURCE", None)
    instance = getattr(resources, "ServiceInstanceIdResourceDetector", None)
    if (os.environ.get("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "").strip()
            or default is None or instance is None):
        return resources.Resource.create(attributes)
    detected = default.merge(instance().detect()).merge(resources.OTELResourceDetector().detect())
    return detected.merge(resources.Resource(attributes))


def setup(service_name: str, *, exporter: SpanExporter | None = None,
          endpoint: str | None = None, site: str | None = None,
          parent: TraceHeaders | None = None,
          attributes: dict[str, str | int] | None = None,
          spool: str | None = None) -> bool:
    """Install the tracer provider. Returns whether tracing is on.

    Sampling follows OpenTelemetry's `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`
    (default: every trace whose parent is sampled, and every new one). `parent`: the trace
    every span of this process will descend from, if known (a worker's job); when the
    sampler would drop all of them (`never_sampled`), tracing stays off. `attributes`: set
    on every span this process starts (a worker's study, job, site, role and rank).
    `spool`: write the spans to this file for the launcher to forward (`cairn.tracespool`)
    instead of posting them."""
    global _tracer, _provider, _exporter
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if exporter is None and not endpoint:
        return _tracer is not None
    if _tracer is None and never_sampled(parent):
        return False
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None and spool:
        from cairn.tracespool import SpoolExporter

        exporter = SpoolExporter(spool)  # type: ignore[assignment]  # the same interface
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        assert endpoint is not None
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    resource = {"service.name": service_name}
    if site:
        resource["cairn.site"] = site
    provider = TracerProvider(resource=_resource(resource))
    from cairn._traceexport import StampingProcessor, StoppableExporter

    if attributes:
        provider.add_span_processor(StampingProcessor(attributes))
    stoppable = StoppableExporter(exporter)
    # A deep queue: bursts of publishes must not drop spans.
    provider.add_span_processor(BatchSpanProcessor(stoppable, schedule_delay_millis=200,
                                                   max_queue_size=65536,
                                                   max_export_batch_size=2048))
    _provider, _exporter = provider, stoppable
    _tracer = provider.get_tracer("cairn")
    return True


def shutdown(timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """Export the spans still queued, waiting at most `timeout_s`, and stop the provider.

    The SDK's own shutdown waits out every retry of its exporter (10 s by default, its
    timeouts notwithstanding), so it runs in a thread of its own: past `timeout_s` the
    exporter is stopped, which ends its retries, and what was left is dropped."""
    global _tracer, _provider, _exporter
    provider, exporter = _provider, _exporter
    _tracer = _provider = _exporter = None
    if provider is None:
        return
    stopper = threading.Thread(target=provider.shutdown, name="cairn-trace-shutdown",
                               daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive() and exporter is not None:
        exporter.shutdown()
        stopper.join(0.5)  # a request in flight keeps its own timeout: it is not waited for


def forward_spool(path: Path) -> int:
    """Post what a worker spooled at `path` to this process's collector, and remove the
    file (see `cairn.tracespool`); returns the batches the collector took."""
    from cairn import tracespool

    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if _tracer is None or not endpoint:
        with contextlib.suppress(OSError):
            path.unlink()
        return 0
    return tracespool.forward(path, endpoint)


def enabled() -> bool:
    return _tracer is not None


def current_traceparent() -> str | None:
    """The traceparent of the current span, for handing to a worker (`TRACEPARENT`)."""
    return current_headers().get(TRACEPARENT)


def current_headers() -> TraceHeaders:
    """The trace headers of the current span (or those passed on, with tracing off)."""
    if _tracer is None:
        return _passed_on.get()
    from opentelemetry import trace

    span = trace.get_current_span()
    return _headers_of(span) if span.get_span_context().is_valid else {}


def event_attributes(event: object) -> dict[str, str]:
    """What a span says of the event it carries: its type and its study, job, site, role."""
    config = getattr(event, "__struct_config__", None)
    out = {"cairn.event": str(config.tag)} if config is not None and config.tag else {}
    for name in ("study", "job", "site", "role"):
        value = getattr(event, name, None)
        if isinstance(value, str) and value:
            out[f"cairn.{name}"] = value
    return out


def messaging_span(operation: str, subject: str) -> tuple[str, dict[str, str]]:
    """A messaging span's name and the attributes that say where its message went:
    `<operation> <template>` (the operation alone for a subject that is not Cairn's, such as
    a reply inbox: never a name that holds ids)."""
    from cairn.subjects import template

    attributes = {"messaging.system": "nats", "messaging.destination.name": subject,
                  "messaging.operation.type": operation, "messaging.operation.name": operation}
    pattern = template(subject)
    if pattern is None:
        return operation, attributes
    attributes["messaging.destination.template"] = pattern
    return f"{operation} {pattern}", attributes


def start_producer(subject: str, message_id: str, event: object = None
                   ) -> tuple[Any, TraceHeaders]:
    """Start a PRODUCER span for one publish; returns (span or None, trace headers to send)."""
    tracer = _tracer
    if tracer is None:
        return None, _passed_on.get()
    from opentelemetry.trace import SpanKind

    name, attributes = messaging_span("publish", subject)
    span = tracer.start_span(
        name, kind=SpanKind.PRODUCER,
        attributes={**attributes, "messaging.message.id": message_id, **event_attributes(event)},
    )
    return span, _headers_of(span)


class ProducerBatch:
    """One PRODUCER span shared by a burst of pipelined publishes.

    A span costs more than a pipelined publish here, so `Bus.publish_async` opens one span per
    batch (up to `limit` messages, ended at `flush_publishes`), and every message of the batch
    carries its traceparent: consumers still join the publisher's trace.
    """

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self._span: Any = None
        self._headers: TraceHeaders = {}
        self._parent: Any = None
        self._count = 0

    def headers(self, subject: str) -> TraceHeaders:
        """The trace headers for the next message of the batch (opening a span as needed)."""
        tracer = _tracer
        if tracer is None:
            return _passed_on.get()
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        parent = trace.get_current_span().get_span_context()
        if self._span is None or self._count >= self.limit or parent != self._parent:
            self.end()
            self._parent = parent
            name, attributes = messaging_span("publish", subject)
            self._span = tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
            self._headers = _headers_of(self._span)
        self._count += 1
        return self._headers

    def end(self) -> None:
        if self._span is not None:
            self._span.set_attribute("messaging.batch.message_count", self._count)
            self._span.end()
        self._span, self._headers, self._count = None, {}, 0


@contextmanager
def consumer_span(subject: str, headers: dict[str, str] | None, *, consumer: str,
                  message_id: str | None = None, event: object = None) -> Iterator[None]:
    """Run a handler inside a CONSUMER span whose parent is the message's trace context."""
    tracer = _tracer
    if tracer is None:
        # Tracing off here, but keep the caller's trace flowing to anything published next.
        token = _passed_on.set(trace_headers(headers))
        try:
            yield
        finally:
            _passed_on.reset(token)
        return
    from opentelemetry.trace import SpanKind

    parent_ctx = _context_of(headers)
    name, attributes = messaging_span("process", subject)
    attributes["messaging.consumer.group.name"] = consumer
    if message_id:
        attributes["messaging.message.id"] = message_id
    attributes.update(event_attributes(event))
    with tracer.start_as_current_span(name, context=parent_ctx,
                                      kind=SpanKind.CONSUMER, attributes=attributes):
        yield


def annotate(**attributes: str | int | float | bool | None) -> None:
    """Add attributes to the current span, e.g. what a request turned out to be once decoded
    (those that are None are left out; a no-op when tracing is off)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes({k: v for k, v in attributes.items() if v is not None})


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[None]:
    """An INTERNAL span for a unit of work (no-op when tracing is off)."""
    tracer = _tracer
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(name, attributes=attributes):
        yield


@contextmanager
def continued(headers: TraceHeaders | None, name: str,
              **attributes: str | int | float | bool) -> Iterator[None]:
    """Run a block in the trace that `headers` carry, e.g. a job's, kept from the message
    that began it: with tracing on, as an INTERNAL span `name` whose parent that is; off, the
    headers are passed on to whatever the block publishes."""
    tracer = _tracer
    if tracer is None:
        token = _passed_on.set(trace_headers(headers))
        try:
            yield
        finally:
            _passed_on.reset(token)
        return
    with tracer.start_as_current_span(name, context=_context_of(headers),
                                      attributes=attributes):
        yield


def reset_from_env() -> None:
    """Take the job's trace context from `TRACEPARENT` again (for a process whose environment
    was replaced after this module was imported: a worker forked from a warm interpreter)."""
    _passed_on.set(env_headers())
