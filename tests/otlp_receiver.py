"""An in-process OTLP/HTTP trace receiver: what Jaeger or a collector would see, for asserts.

No collector can be installed here (see ENVIRONMENT.md), so tests receive the protobuf export
themselves: `http.server` on a free loopback port, in a thread, decoding each POST /v1/traces.

    with OtlpReceiver() as receiver:
        telemetry.setup("test", endpoint=receiver.endpoint)
        ...
        telemetry.shutdown()            # flushes
        spans = receiver.spans()
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened."""

    service: str
    name: str
    kind: str  # "PRODUCER", "CONSUMER", ... (the OTLP enum without its SPAN_KIND_ prefix)
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


class OtlpReceiver:
    """A loopback OTLP/HTTP receiver (protobuf encoding, optional gzip/deflate)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path.rstrip("/") != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver._lock:
                    receiver._requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
            name="otlp-receiver",
        )

    @property
    def endpoint(self) -> str:
        """The base URL to give `cairn.telemetry.setup(endpoint=...)`."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def spans(self) -> list[ReceivedSpan]:
        out = []
        with self._lock:
            requests = list(self._requests)
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            ReceivedSpan(
                                service=str(resource.get("service.name", "")),
                                name=span.name,
                                kind=SpanProto.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                attributes={a.key: _value(a.value) for a in span.attributes},
                            )
                        )
        return out
