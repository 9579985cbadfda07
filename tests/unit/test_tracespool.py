"""A worker's spans spooled to a file and forwarded by its launcher: the round trip to a real
OTLP receiver, and what a hostile spool (the job writes it) gets."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cairn import tracespool
from tools.otlp_receiver import OtlpReceiver


def spool_spans(path: Path, *names: str) -> SpanExportResult:
    """Spans made by a real SDK provider, spooled by a SpoolExporter (one frame each)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for name in names:
        with tracer.start_as_current_span(name, attributes={"cairn.job": "j-1"}):
            pass
    provider.shutdown()
    exporter = tracespool.SpoolExporter(str(path))
    [result] = {exporter.export([span]) for span in memory.get_finished_spans()}
    return result


def test_spooled_spans_reach_the_collector(tmp_path: Path) -> None:
    spool = tmp_path / tracespool.SPOOL_NAME
    assert spool_spans(spool, "first", "second") == SpanExportResult.SUCCESS
    assert len(tracespool.read_frames(spool)) == 2
    with OtlpReceiver() as receiver:
        assert tracespool.forward(spool, receiver.endpoint) == 2
        spans = receiver.spans()
    assert sorted(s.name for s in spans) == ["first", "second"]
    assert all(s.attributes["cairn.job"] == "j-1" for s in spans)
    assert not spool.exists()  # forwarded once


def test_the_launcher_follows_no_link(tmp_path: Path) -> None:
    """A job that replaces its spool with a link to a file of the launcher's does not get
    that file sent anywhere (nor written, by the worker's exporter)."""
    secret = tmp_path / "secret"
    spool_spans(secret, "not the job's")  # a valid spool, so only the link check stops it
    link = tmp_path / tracespool.SPOOL_NAME
    link.symlink_to(secret)
    assert tracespool.read_frames(link) == []
    assert spool_spans(link, "through the link") == SpanExportResult.FAILURE
    assert len(tracespool.read_frames(secret)) == 1


def test_what_is_not_a_frame_is_dropped(tmp_path: Path) -> None:
    good = tmp_path / "good"
    spool_spans(good, "kept")
    frame = good.read_bytes()
    cases = {
        "garbage": os.urandom(4096),
        "garbage, then a frame": struct.pack(">I", 16) + b"\xff" * 16 + frame,
        "a frame, then one cut short": frame + frame[:-3],
        "a frame, then an absurd length": frame + struct.pack(">I", 2**31) + b"x" * 64,
        "empty": b"",
    }
    kept = {"garbage": 0, "garbage, then a frame": 1, "a frame, then one cut short": 1,
            "a frame, then an absurd length": 1, "empty": 0}
    for name, data in cases.items():
        path = tmp_path / "case"
        path.write_bytes(data)
        assert len(tracespool.read_frames(path)) == kept[name], name
    assert tracespool.read_frames(tmp_path / "missing") == []
    assert tracespool.read_frames(tmp_path) == []  # a directory


def test_a_spool_is_read_only_up_to_its_limit(tmp_path: Path) -> None:
    good = tmp_path / "good"
    spool_spans(good, "one")
    frame = good.read_bytes()
    big = tmp_path / "big"
    copies = tracespool.SPOOL_MAX_BYTES // len(frame) + 100
    big.write_bytes(frame * copies)
    frames = tracespool.read_frames(big)
    assert 0 < len(frames) < copies
    assert len(frames) * len(frame) <= tracespool.SPOOL_MAX_BYTES
