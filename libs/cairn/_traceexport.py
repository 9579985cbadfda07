"""A span exporter that `cairn.telemetry.shutdown` can stop while the SDK is still retrying.

Imported only where tracing is set up (it needs the OpenTelemetry SDK).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
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
