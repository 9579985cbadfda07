"""A worker's spans handed to its launcher through a file, so the worker never waits on the
collector.

A process-backend worker whose launcher traces is given `CAIRN_TRACE_SPOOL`, a path in its
working directory. Its span exporter (`SpoolExporter`) appends each batch there as one
frame: a 4-byte big-endian length, then an OTLP `ExportTraceServiceRequest` in protobuf, as
the collector would have received it. Writing a frame is a local append, so a worker ends
without the round trip to the collector (nor up to a second of it when the collector is
down). Once the worker has ended and its end is published, the launcher reads the file
(`read_frames`: no link followed, at most `SPOOL_MAX_BYTES`, every frame checked to be an
OTLP request) and posts each frame to its own OTLP endpoint (`post_frames`), then removes it.

The file is written by the job's own process, so the launcher trusts nothing in it: what is
not a well-formed frame is dropped, and the frames go to the collector the job could have
reached itself anyway.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("cairn.telemetry")

SPOOL_ENV = "CAIRN_TRACE_SPOOL"
SPOOL_NAME = ".cairn-spans"
SPOOL_MAX_BYTES = 32 * 2**20
"""What a worker may spool, and a launcher reads, at most: beyond it, spans are dropped."""
FRAME_MAX_BYTES = 8 * 2**20
POST_TIMEOUT_S = 10.0
_LEN = struct.Struct(">I")


def spool_path(workdir: str | Path) -> Path:
    """The spool of the worker whose working directory is `workdir` (the launcher's view)."""
    return Path(workdir) / SPOOL_NAME


class SpoolExporter:
    """A span exporter (the SDK's `SpanExporter` interface) that appends to the spool."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._written = 0
        self._full = False

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        data = encode_spans(spans).SerializeToString()
        frame = _LEN.pack(len(data)) + data
        if len(data) > FRAME_MAX_BYTES or self._written + len(frame) > SPOOL_MAX_BYTES:
            if not self._full:
                log.warning("the trace spool %s is full: spans from here on are dropped",
                            self.path)
            self._full = True
            return SpanExportResult.FAILURE
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                         0o600)
            try:
                os.write(fd, frame)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("could not spool spans to %s: %s", self.path, exc)
            return SpanExportResult.FAILURE
        self._written += len(frame)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        pass


def read_frames(path: Path) -> list[bytes]:
    """The well-formed frames of a spool (none if it is missing, not a regular file, or a
    link); reading stops at `SPOOL_MAX_BYTES` or the first frame that is cut short."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = b""
        while len(data) < SPOOL_MAX_BYTES and (chunk := os.read(fd, 1 << 20)):
            data += chunk
    except OSError:
        return []
    finally:
        os.close(fd)
    frames, at = [], 0
    while at + _LEN.size <= len(data):
        (size,) = _LEN.unpack_from(data, at)
        at += _LEN.size
        if size > FRAME_MAX_BYTES or at + size > len(data):
            break
        frame = data[at:at + size]
        at += size
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(frame)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends: not a frame
            continue
        if request.resource_spans:
            frames.append(frame)
    return frames


def post_frames(frames: list[bytes], endpoint: str) -> int:
    """Post each frame to the OTLP/HTTP collector at `endpoint` (a base URL); returns how
    many it took. Follows the exporter's `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` and
    `..._CERTIFICATE`, `..._CLIENT_CERTIFICATE` and `..._CLIENT_KEY`."""
    import requests

    env = os.environ

    def setting(name: str) -> str | None:
        return env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}")

    url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or endpoint.rstrip("/") + "/v1/traces"
    headers = {"Content-Type": "application/x-protobuf"}
    with contextlib.suppress(Exception):
        from opentelemetry.util.re import parse_env_headers

        headers.update(parse_env_headers(setting("HEADERS") or "", liberal=True))
    cert, key = setting("CLIENT_CERTIFICATE"), setting("CLIENT_KEY")
    taken = 0
    with requests.Session() as session:
        for frame in frames:
            try:
                reply = session.post(url, data=frame, headers=headers, timeout=POST_TIMEOUT_S,
                                     verify=setting("CERTIFICATE") or True,
                                     cert=(cert, key) if cert and key else cert)
            except requests.RequestException as exc:
                log.warning("could not forward a worker's spans to %s: %s", url, exc)
                break
            if reply.ok:
                taken += 1
            else:
                log.warning("the collector at %s refused a worker's spans: HTTP %s", url,
                            reply.status_code)
    return taken


def forward(path: Path, endpoint: str) -> int:
    """Post a spool's frames to the collector and remove it; returns the frames taken."""
    frames = read_frames(path)
    with contextlib.suppress(OSError):
        path.unlink()
    return post_frames(frames, endpoint) if frames else 0
