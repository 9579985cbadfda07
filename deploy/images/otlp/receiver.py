"""A tiny OTLP/HTTP trace receiver that logs what it gets: a stand-in for Jaeger in tests.

    python receiver.py [--host 127.0.0.1] [--port 4318] [--summary /data/spans.json]

Answers `POST /v1/traces` (protobuf, gzip or not) as a collector would, prints one line per
export (`received N spans from SERVICE, total T`), and keeps `--summary` up to date: span
counts per service and per span name, and per trace id the services that sent its spans.
Run by the compose tests' override file in the parent image (its Python has
opentelemetry-proto, a dependency of the OTLP exporter). Not for production: use Jaeger or
an OpenTelemetry Collector.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import threading
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

MAX_BODY = 32 * 1024 * 1024


class SpanTally:
    """Counts of what was received, written to a JSON file after every export."""

    def __init__(self, summary: Path | None) -> None:
        self.summary = summary
        self.by_service: Counter[str] = Counter()
        self.by_name: Counter[str] = Counter()
        self.traces: dict[str, set[str]] = {}
        self.lock = threading.Lock()

    def add(self, request: ExportTraceServiceRequest) -> tuple[int, str]:
        count, services = 0, set()
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "?")
                services.add(service)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        count += 1
                        self.by_service[service] += 1
                        self.by_name[span.name] += 1
                        self.traces.setdefault(span.trace_id.hex(), set()).add(service)
            self._write()
        return count, ",".join(sorted(services))

    def total(self) -> int:
        return sum(self.by_service.values())

    def _write(self) -> None:
        if self.summary is None:
            return
        data = {"spans": self.total(), "by_service": dict(sorted(self.by_service.items())),
                "by_name": dict(sorted(self.by_name.items())),
                "traces": {t: sorted(s) for t, s in sorted(self.traces.items())}}
        tmp = self.summary.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.summary)


def handler(tally: SpanTally) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            if self.path != "/v1/traces" or not 0 < length <= MAX_BODY:
                self.send_error(404 if self.path != "/v1/traces" else 400)
                return
            body = self.rfile.read(length)
            encoding = self.headers.get("Content-Encoding", "")
            try:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
            except Exception as exc:  # a bad export is answered, never fatal
                self.send_error(400, f"not an OTLP trace export: {exc}")
                return
            count, services = tally.add(request)
            print(f"received {count} spans from {services}, total {tally.total()}",
                  flush=True)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def do_GET(self) -> None:  # noqa: N802
            # A health check: answers while the server runs.
            body = json.dumps({"spans": tally.total()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # one line per export is printed above; access logs would drown it

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Receive OTLP/HTTP traces and log counts.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=4318, help="port (OTLP/HTTP: 4318)")
    parser.add_argument("--summary", type=Path, default=None,
                        help="JSON file kept up to date with span counts and trace ids")
    args = parser.parse_args(argv)
    tally = SpanTally(args.summary)
    server = ThreadingHTTPServer((args.host, args.port), handler(tally))
    print(f"OTLP/HTTP receiver on http://{args.host}:{args.port}/v1/traces", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
