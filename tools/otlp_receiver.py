"""A small OTLP/HTTP trace receiver: what Jaeger or a collector would see, for tests,
benchmarks and the compose stack. Not for production: use Jaeger or an OpenTelemetry
Collector.

In a test or a benchmark, in-process (a loopback port of its own, in a thread):

    with OtlpReceiver() as receiver:
        telemetry.setup("test", endpoint=receiver.endpoint)
        ...
        telemetry.shutdown()            # flushes
        spans = receiver.spans()

As a program, in place of Jaeger in docker-compose.test.yml (the parent image's Python has
opentelemetry-proto, a dependency of the OTLP exporter, and nothing of this repository):

    python otlp_receiver.py [--host 127.0.0.1] [--port 4318] [--summary spans.json]

It prints one line per export (`received N spans from SERVICE, total T`) and keeps
`--summary` up to date: span counts per service and per span name, and per trace id the
services that sent its spans. `GET /` answers while it runs (a health check).

Either way it answers `POST /v1/traces` (protobuf, gzip, deflate or neither) as a collector
would; a body that is not an OTLP trace export, or past `MAX_BODY`, is answered 400 and
kept nowhere.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import threading
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

MAX_BODY = 32 * 1024 * 1024
TRACES_PATH = "/v1/traces"


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


def spans_of(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Every span of one export, with its resource's service name."""
    out = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(ReceivedSpan(
                    service=str(resource.get("service.name", "")), name=span.name,
                    kind=SpanProto.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    attributes={a.key: _value(a.value) for a in span.attributes}))
    return out


def decode_export(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    """One POSTed body as an export. Raises ValueError when it is not one."""
    try:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        return ExportTraceServiceRequest.FromString(body)
    except Exception as exc:  # protobuf's DecodeError, zlib's error, gzip's BadGzipFile
        raise ValueError(f"not an OTLP trace export: {exc}") from None


class OtlpReceiver:
    """An OTLP/HTTP receiver on `host:port` (default: a free loopback port), in a thread.

    Args:
        on_export: Called with each export's spans as it arrives (in the server's thread).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 on_export: Callable[[list[ReceivedSpan]], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._on_export = on_export
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True,
                                        name="otlp-receiver")

    @property
    def endpoint(self) -> str:
        """The base URL to give `cairn.telemetry.setup(endpoint=...)`."""
        return f"http://{self.host}:{self.port}"

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in the order they came."""
        with self._lock:
            return list(self._spans)

    def received(self, request: ExportTraceServiceRequest) -> int:
        spans = spans_of(request)
        with self._lock:
            self._spans.extend(spans)
            if self._on_export is not None:
                self._on_export(spans)
            return len(self._spans)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (the program)."""
        try:
            self._server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self._server.server_close()


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            if self.path.rstrip("/") != TRACES_PATH:
                self.send_error(404)
                return
            if not 0 < length <= MAX_BODY:
                self.send_error(400, f"a body of 1 to {MAX_BODY} bytes, not {length}")
                return
            try:
                request = decode_export(self.rfile.read(length),
                                        (self.headers.get("Content-Encoding") or "").lower())
            except ValueError as exc:  # a bad export is answered, never fatal
                self.send_error(400, str(exc))
                return
            receiver.received(request)
            self._reply("application/x-protobuf",
                        ExportTraceServiceResponse().SerializeToString())

        def do_GET(self) -> None:  # a health check: answers while the server runs
            body = json.dumps({"spans": len(receiver.spans())}).encode()
            self._reply("application/json", body)

        def _reply(self, content_type: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # access logs would drown the output

    return Handler


class SpanTally:
    """Counts of what was received, written to `summary` (JSON) after every export."""

    def __init__(self, summary: Path | None) -> None:
        self.summary = summary
        self.by_service: Counter[str] = Counter()
        self.by_name: Counter[str] = Counter()
        self.traces: dict[str, set[str]] = {}

    def add(self, spans: list[ReceivedSpan]) -> None:
        for span in spans:
            service = span.service or "?"
            self.by_service[service] += 1
            self.by_name[span.name] += 1
            self.traces.setdefault(span.trace_id, set()).add(service)
        total = sum(self.by_service.values())
        services = ",".join(sorted({s.service or "?" for s in spans}))
        print(f"received {len(spans)} spans from {services}, total {total}", flush=True)
        if self.summary is not None:
            data = {"spans": total, "by_service": dict(sorted(self.by_service.items())),
                    "by_name": dict(sorted(self.by_name.items())),
                    "traces": {t: sorted(s) for t, s in sorted(self.traces.items())}}
            tmp = self.summary.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Receive OTLP/HTTP traces and log counts.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=4318, help="port (OTLP/HTTP: 4318)")
    parser.add_argument("--summary", type=Path, default=None,
                        help="JSON file kept up to date with span counts and trace ids")
    args = parser.parse_args(argv)
    receiver = OtlpReceiver(args.host, args.port, on_export=SpanTally(args.summary).add)
    print(f"OTLP/HTTP receiver on {receiver.endpoint}{TRACES_PATH}", flush=True)
    receiver.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
