"""The pieces of `cairn.telemetry` that need the OpenTelemetry SDK: a span exporter that
`shutdown` can stop while the SDK is still retrying, and a processor that stamps a process's
own attributes on every span it starts.

Imported only where tracing is set up.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class StoppableExporter(SpanExporter):
    """Delegates to `exporter`; `shutdown` stops it once (its retries end), and any later
    call, the SDK's own at the end of its shutdown, is quietly ignored."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter
        self._stopped = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        if self._stopped.acquire(blocking=False):
            self._exporter.shutdown()


class StampingProcessor(SpanProcessor):
    """Sets `attributes` on every span as it starts (before the exporting processor sees it
    end), so each of a worker's spans names its study, job, site, role and rank; what a span
    already says (the site of an event it carries, say) stays."""

    def __init__(self, attributes: dict[str, str | int]) -> None:
        self._attributes = dict(attributes)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        have = span.attributes or {}
        span.set_attributes({k: v for k, v in self._attributes.items() if k not in have})
