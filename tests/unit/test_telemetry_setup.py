"""When tracing sets itself up, and how long its shutdown may hold a process that ends."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from cairn import telemetry

SAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNSAMPLED = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


@pytest.fixture(autouse=True)
def _off_afterwards() -> object:
    yield None
    telemetry.shutdown()


@pytest.mark.parametrize(("sampler", "traceparent", "never"), [
    (None, UNSAMPLED, True),                         # the default is parent-based
    ("parentbased_always_on", UNSAMPLED, True),
    ("parentbased_traceidratio", UNSAMPLED, True),
    ("parentbased_always_on", SAMPLED, False),
    ("parentbased_always_on", None, False),          # a new root would be sampled
    ("always_on", UNSAMPLED, False),                 # ignores its parent
    ("traceidratio", UNSAMPLED, False),
    ("always_off", SAMPLED, True),
    ("always_off", None, True),
    ("parentbased_always_on", "00-00000000000000000000000000000000-00f067aa0ba902b7-00",
     False),                                          # an invalid parent starts a new trace
    ("parentbased_always_on", "garbage", False),
    ("parentbased_always_on", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
     False),
])
def test_never_sampled(monkeypatch: pytest.MonkeyPatch, sampler: str | None,
                       traceparent: str | None, never: bool) -> None:
    if sampler is None:
        monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    else:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    parent = {"traceparent": traceparent} if traceparent else {}
    assert telemetry.never_sampled(parent) is never


def test_a_process_under_an_unsampled_parent_does_not_set_tracing_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    endpoint = "http://127.0.0.1:9"
    assert not telemetry.setup("w", endpoint=endpoint, parent={"traceparent": UNSAMPLED})
    assert not telemetry.enabled()
    # Off, the unsampled context still flows to what it publishes.
    with telemetry.continued({"traceparent": UNSAMPLED}, "worker"):
        assert telemetry.current_traceparent() == UNSAMPLED
    assert telemetry.setup("w", endpoint=endpoint, parent={"traceparent": SAMPLED})
    assert telemetry.enabled()


def _refusing_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: connections to it are refused


def test_shutdown_does_not_wait_out_the_exporters_retries() -> None:
    """A collector that is down: the SDK alone retries for its 10 s timeout (over 7 s here
    with its backoff); Cairn's shutdown gives up after the time it was given."""
    script = textwrap.dedent(f"""\
        from cairn import telemetry
        assert telemetry.setup("w", endpoint="http://127.0.0.1:{_refusing_port()}")
        with telemetry.span("lost"):
            pass
        telemetry.shutdown(timeout_s=0.5)
        assert not telemetry.enabled()
        print("ended")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=5, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ended"


def test_the_resource_is_what_the_sdk_would_make(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cairn builds the SDK's default resource itself (without its thread pool): the same
    attributes, the operator's OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME included (the
    SDK keeps one service.instance.id per process, new after a fork)."""
    from opentelemetry.sdk.resources import Resource

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=lab,cairn.site=x")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "overridden")
    ours = dict(telemetry._resource({"service.name": "cairn-worker", "cairn.site": "site-a"})
                .attributes)
    sdk = dict(Resource.create({"service.name": "cairn-worker", "cairn.site": "site-a"})
               .attributes)
    assert ours["service.instance.id"]
    assert ours == sdk
    assert ours["deployment.environment"] == "lab" and ours["cairn.site"] == "site-a"
