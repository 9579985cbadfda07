"""What `cairn job submit`/`rerun` send, and how the timeline reads: no network needed."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from cairn import events as ev
from cairn.bus import Replayed
from cairn.client.jobrequest import (
    REQUEST_FIELDS,
    JobRequest,
    request_of_spec,
    request_of_submitted,
)
from cairn.client.timeline import entry, format_line, summary
from cairn.spec import load_job_spec

AT = datetime(2025, 1, 2, 10, 31, 2, 120000, tzinfo=UTC)


def load(tmp_path: Path) -> JobRequest:
    (tmp_path / "app").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(
        textwrap.dedent("""\
        name: fedavg-lr
        code: ./app
        roles:
          server:
            entrypoint: python -m fedavg.server
          client:
            entrypoint: python -m fedavg.client
            resources: {gpus: 1, cpus: 500m, memory: 1Gi}
            sites: [site-a, site-b]
            min_sites: 2
        params: {rounds: 3}
        timeout: 30m
        requires: {recipe: h100-ubuntu-training, max_age: 7d}
        """)
    )
    return request_of_spec(load_job_spec(spec), "ab" * 32)


def test_the_request_has_exactly_the_job_request_fields_of_job_submitted() -> None:
    submitted = {f.name: f.type for f in msgspec.structs.fields(ev.JobSubmitted)}
    request = {f.name: f.type for f in msgspec.structs.fields(JobRequest)}
    assert set(request) == set(REQUEST_FIELDS)
    assert all(request[name] == submitted[name] for name in request)


def test_a_spec_becomes_a_request_the_coordinator_can_turn_into_job_submitted(
    tmp_path: Path,
) -> None:
    wire = msgspec.json.decode(msgspec.json.encode(load(tmp_path)))
    event = msgspec.convert(
        {
            **wire,
            "id": "e1",
            "at": AT.isoformat(),
            "source": "coordinator@hub",
            "job": "j-1",
            "study": "lung",
        },
        ev.JobSubmitted,
    )
    server, client = event.roles
    assert (server.name, server.placement, server.sites) == ("server", "hub", None)
    assert (client.placement, client.sites, client.min_sites) == ("sites", ["site-a", "site-b"], 2)
    assert client.resources == ev.Resources(gpus=1, millicpus=500, memory_bytes=1 << 30)
    assert event.code_digest == "ab" * 32
    assert event.timeout_s == 1800
    assert event.requires == ev.RecipeRequirement(
        recipe="h100-ubuntu-training", max_age_s=7 * 86400
    )
    assert event.params == {"rounds": 3}


def test_a_rerun_keeps_the_recorded_request_and_names_the_original(tmp_path: Path) -> None:
    original = load(tmp_path)
    submitted = ev.JobSubmitted(
        id="e1", at=AT, source="coordinator@hub", job="j-1", **msgspec.structs.asdict(original)
    )
    again = request_of_submitted(submitted, rerun_of="j-1")
    assert again == msgspec.structs.replace(original, rerun_of="j-1")


def test_timeline_lines_say_what_happened() -> None:
    exited = ev.WorkerExited(
        id="e2",
        at=AT,
        source="launcher@site-a",
        study="lung",
        job="j-1",
        site="site-a",
        role="client",
        rank=0,
        launch_id="l",
        exit_code=0,
    )
    assert summary(exited) == "site-a client/0 exited code=0"
    failed = ev.JobFailed(
        id="e3",
        at=AT,
        source="coordinator@hub",
        job="j-1",
        reason="too-few-sites",
        message="1 of 2 clients left",
    )
    assert summary(failed) == "failed cause=too-few-sites: 1 of 2 clients left"
    line = format_line(
        entry(
            Replayed(
                seq=12,
                subject="cairn.study.lung.job.j-1.site.site-a.exited",
                time=AT,
                event=exited,
                raw=b"",
            )
        )
    )
    assert line == "#12    10:31:02.120 j-1 site-a client/0 exited code=0"
    crashed = msgspec.structs.replace(exited, exit_code=137, reason="oom")
    assert summary(crashed) == "site-a client/0 exited code=137 cause=oom"


def test_an_undecodable_message_still_has_a_line() -> None:
    e = entry(
        Replayed(
            seq=3,
            subject="cairn.study.lung.job.x.y",
            time=AT,
            event=None,
            raw=b"garbage",
            error="Expected JSON",
        )
    )
    assert e.type == "undecodable"
    assert "Expected JSON" in format_line(e)
