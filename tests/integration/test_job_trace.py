"""One trace per job: `cairn job submit` begins it; the coordinator, each agent, each
launcher and each worker continue it, received by an OTLP receiver the test runs itself."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import textwrap
from pathlib import Path

from cairn.runtime.embedded import DEFAULT_ADMIN
from tests.fixtures.federation import connect, make_federation
from tools.otlp_receiver import OtlpReceiver, ReceivedSpan

WORKER = """\
import os

from cairn.worker import main

async def run(w):
    # The process backend has a traced worker spool its spans for the launcher to send.
    assert os.environ.get("CAIRN_TRACE_SPOOL"), "no trace spool"
    await w.data.broadcast("hello", {"from": w.site})  # a data-plane message: no event
    await w.progress(1, 1)

main(run)
"""


def write_job(tmp: Path) -> Path:
    (tmp / "app").mkdir(parents=True)
    (tmp / "app" / "main.py").write_text(WORKER)
    spec = tmp / "job.yaml"
    spec.write_text(textwrap.dedent("""\
        name: traced
        code: ./app
        roles:
          client:
            entrypoint: python main.py
            resources: {cpus: 1, memory: 256Mi}
            sites: [site-a, site-b]
        timeout: 5m
        """))
    return spec


async def submit_by_cli(url: str, spec: Path, endpoint: str,
                        auth: dict[str, str] | None = None) -> str:
    env = {**os.environ, "CAIRN_NATS_URL": url, "CAIRN_STUDY": "demo", **(auth or {}),
           "CAIRN_ACTOR": DEFAULT_ADMIN, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    env.pop("CAIRN_CONTEXT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cairn", "job", "submit", str(spec), "-o", "json", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    found = re.search(r"j-[a-z0-9]+", out.decode())
    assert found, out.decode()
    return found.group(0)


def by(spans: list[ReceivedSpan], **want: str) -> list[ReceivedSpan]:
    return [s for s in spans if all(s.attributes.get(k) == v or getattr(s, k, None) == v
                                    for k, v in want.items())]


async def test_a_two_site_job_is_one_trace(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        fed = make_federation(tmp_path)
        fed.extra_env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        fed.start()
        try:
            await fed.wait_healthy(60)
            assert fed.nats is not None
            job_id = await submit_by_cli(fed.nats.url, write_job(tmp_path / "job"),
                                         receiver.endpoint, fed.client_env())
            client = await connect(fed)
            try:
                final = await client.wait(job_id, timeout=120)
            finally:
                await client.close()
            assert final.state == "completed", final
        finally:
            fed.stop()  # every parent flushes its spans as it stops
        spans = receiver.spans()
    assert not list(tmp_path.rglob(".cairn-spans")), "a spool was left behind"

    root = [s for s in spans if s.name == "cairn job submit"]
    assert len(root) == 1, [s.name for s in spans if s.service == "cairn-cli"]
    trace = root[0].trace_id
    assert root[0].parent_span_id == ""
    # Every span that names this job is in the submit's trace, but the requests that only
    # read it (the client's polling), each a trace of its own.
    of_job = [s for s in spans if s.attributes.get("cairn.job") == job_id
              and s.attributes.get("cairn.request") in (None, "submit")]
    strays = [(s.service, s.name, s.kind) for s in of_job if s.trace_id != trace]
    assert of_job and not strays, strays
    in_trace = [s for s in spans if s.trace_id == trace]
    ids = {s.span_id for s in in_trace}
    # Parented correctly: one root, every other span's parent is a span of the same trace.
    assert [s for s in in_trace if s.parent_span_id == ""] == root
    assert all(s.parent_span_id in ids for s in in_trace if s is not root[0])
    # Each hop is there: the request, the coordinator's decisions, each agent's acceptance,
    # each launch, each worker.
    assert by(in_trace, kind="CONSUMER", **{"cairn.event": "job.submitted"})
    assert by(in_trace, name="coordinator decide")
    for site in ("site-a", "site-b"):
        assert by(in_trace, kind="CONSUMER", **{"cairn.event": "cmd.deploy", "cairn.site": site})
        assert by(in_trace, kind="PRODUCER",
                  **{"cairn.event": "deployment.accepted", "cairn.site": site})
        assert by(in_trace, kind="CONSUMER",
                  **{"cairn.event": "launch.requested", "cairn.site": site})
        workers = by(in_trace, name="worker client", service="cairn-worker",
                     **{"cairn.site": site})
        assert len(workers) == 1
        progress = by(in_trace, kind="PRODUCER",
                      **{"cairn.event": "worker.progress", "cairn.site": site})
        assert progress and progress[0].parent_span_id == workers[0].span_id
    # Every span a worker made names its job (its data-plane messages carry no event).
    of_workers = [s for s in in_trace if s.service == "cairn-worker"]
    unnamed = [s.name for s in of_workers
               if s.attributes.get("cairn.job") != job_id or s.attributes.get("cairn.study")
               != "demo" or s.attributes.get("cairn.role") != "client"]
    assert len(of_workers) > 2 and not unnamed, unnamed
    # Span names are the same for every job (OpenTelemetry's messaging conventions: the
    # operation and the subject's template); the ids are attributes.
    named = [s.name for s in spans if job_id in s.name or "site-a" in s.name
             or "demo" in s.name]
    assert not named, named
    for span in in_trace:
        if span.kind in ("PRODUCER", "CONSUMER"):
            template = span.attributes["messaging.destination.template"]
            operation = "publish" if span.kind == "PRODUCER" else "process"
            assert span.name == f"{operation} {template}", span
            assert span.attributes["messaging.destination.name"] != template
    assert by(in_trace, name="publish cairn.study.{study}.job.{job}.worker.{site}.{role}.progress")
    # The request that began the job, as the coordinator answered it: the verb, who asked,
    # and the job it made.
    [request] = by(in_trace, kind="CONSUMER", **{"cairn.request": "submit"})
    assert request.attributes["cairn.actor"] == DEFAULT_ADMIN
    assert request.attributes["cairn.study"] == "demo"
    assert request.attributes["cairn.job"] == job_id
