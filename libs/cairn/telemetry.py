"""OpenTelemetry for Cairn: one tracer provider, W3C trace context over NATS headers.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (OTLP/HTTP export, batched) or when
`setup(..., exporter=...)` is given one. Off, OpenTelemetry is not even imported (it costs a
parent or a worker tens of milliseconds at start): the traceparent a message came with is
still carried to whatever its handler publishes, through a context variable. The
traceparent header is written and parsed by hand: the generic propagator machinery costs more
than a publish on this path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import SpanContext, Tracer

TRACEPARENT = "traceparent"
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
# With tracing off: the traceparent of the message being handled, passed on to publishes;
# in a worker, the job's (TRACEPARENT, from the launcher) until a message says otherwise.
_passed_on: ContextVar[str | None] = ContextVar("cairn_traceparent",
                                                default=os.environ.get("TRACEPARENT") or None)


def setup(service_name: str, *, exporter: SpanExporter | None = None,
          endpoint: str | None = None) -> bool:
    """Install the tracer provider. Returns whether tracing is on."""
    global _tracer, _provider
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if exporter is None and not endpoint:
        return _tracer is not None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        assert endpoint is not None
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    # A deep queue: bursts of publishes must not drop spans.
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200,
                                                   max_queue_size=65536,
                                                   max_export_batch_size=2048))
    _provider = provider
    _tracer = provider.get_tracer("cairn")
    return True


def shutdown() -> None:
    """Flush and stop the provider (spans still queued are exported)."""
    global _tracer, _provider
    if _provider is not None:
        _provider.force_flush(5000)
        _provider.shutdown()
    _tracer = None
    _provider = None


def enabled() -> bool:
    return _tracer is not None


def format_traceparent(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(value: str | None) -> SpanContext | None:
    """Parse a W3C traceparent header; None when absent or malformed."""
    if not value:
        return None
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3][:2], 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                       trace_flags=TraceFlags(flags))


def current_traceparent() -> str | None:
    """The traceparent of the current span, for handing to a worker (`TRACEPARENT`)."""
    if _tracer is None:
        return _passed_on.get()
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return format_traceparent(ctx) if ctx.is_valid else None


def start_producer(subject: str, message_id: str) -> tuple[Any, str | None]:
    """Start a PRODUCER span for one publish; returns (span or None, traceparent to send)."""
    tracer = _tracer
    if tracer is None:
        return None, _passed_on.get()
    from opentelemetry.trace import SpanKind

    span = tracer.start_span(
        f"{subject} publish", kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "nats", "messaging.destination.name": subject,
                    "messaging.operation.type": "publish", "messaging.message.id": message_id},
    )
    return span, format_traceparent(span.get_span_context())


class ProducerBatch:
    """One PRODUCER span shared by a burst of pipelined publishes.

    A span costs more than a pipelined publish here, so `Bus.publish_async` opens one span per
    batch (up to `limit` messages, ended at `flush_publishes`), and every message of the batch
    carries its traceparent: consumers still join the publisher's trace.
    """

    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self._span: Any = None
        self._traceparent: str | None = None
        self._parent: Any = None
        self._count = 0

    def traceparent(self, subject: str) -> str | None:
        tracer = _tracer
        if tracer is None:
            return _passed_on.get()
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        parent = trace.get_current_span().get_span_context()
        if self._span is None or self._count >= self.limit or parent != self._parent:
            self.end()
            self._parent = parent
            self._span = tracer.start_span(
                f"{subject} publish", kind=SpanKind.PRODUCER,
                attributes={"messaging.system": "nats", "messaging.destination.name": subject,
                            "messaging.operation.type": "publish"})
            self._traceparent = format_traceparent(self._span.get_span_context())
        self._count += 1
        return self._traceparent

    def end(self) -> None:
        if self._span is not None:
            self._span.set_attribute("messaging.batch.message_count", self._count)
            self._span.end()
        self._span, self._traceparent, self._count = None, None, 0


@contextmanager
def consumer_span(subject: str, headers: dict[str, str] | None, *, consumer: str,
                  message_id: str | None = None) -> Iterator[None]:
    """Run a handler inside a CONSUMER span whose parent is the message's traceparent."""
    incoming = (headers or {}).get(TRACEPARENT)
    tracer = _tracer
    if tracer is None:
        # Tracing off here, but keep the caller's trace flowing to anything published next.
        token = _passed_on.set(incoming)
        try:
            yield
        finally:
            _passed_on.reset(token)
        return
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanKind

    remote = parse_traceparent(incoming)
    parent_ctx = trace.set_span_in_context(NonRecordingSpan(remote)) if remote else None
    attributes: dict[str, str] = {"messaging.system": "nats",
                                  "messaging.destination.name": subject,
                                  "messaging.operation.type": "process",
                                  "messaging.consumer.group.name": consumer}
    if message_id:
        attributes["messaging.message.id"] = message_id
    with tracer.start_as_current_span(f"{subject} process", context=parent_ctx,
                                      kind=SpanKind.CONSUMER, attributes=attributes):
        yield


@contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[None]:
    """An INTERNAL span for a unit of work (no-op when tracing is off)."""
    tracer = _tracer
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(name, attributes=attributes):
        yield


def reset_from_env() -> None:
    """Take the job's trace context from `TRACEPARENT` again (for a process whose environment
    was replaced after this module was imported: a worker forked from a warm interpreter)."""
    _passed_on.set(os.environ.get("TRACEPARENT") or None)
