"""The docker backend on a real, private Docker Engine: contract, mounts, limits, exits,
cancel, timeout, reattach. Workers run a busybox image built here (no registry is reachable)."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.errors import InvalidInput
from cairn.launcher.backends import DatasetMount, LaunchFailed, LaunchSpec, make_launch_id
from cairn.launcher.backends.docker import DockerBackend, container_name
from tests.fixtures.docker import DockerEngine

IMAGE = "cairn-test/busybox:1"
BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "echo", "cat", "env", "sleep", "dd", "touch", "ls", "head", "tail", "true")
CONTRACT = {"CAIRN_NATS_URL": "nats://127.0.0.1:4222", "CAIRN_STUDY": "lung",
            "CAIRN_JOB": "j1", "CAIRN_SITE": "site-a", "CAIRN_ROLE": "client",
            "CAIRN_RANK": "0", "CAIRN_ATTEMPT": "0", "CAIRN_WORKDIR": "/caller/guess"}


def busybox_tar() -> bytes:
    """A root filesystem with a static busybox and its applets as links."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.add(BUSYBOX, arcname="bin/busybox")
        for name in APPLETS:
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for folder in ("tmp", "cairn"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    return out.getvalue()


@pytest.fixture(scope="module")
def engine(dockerd: DockerEngine) -> Iterator[DockerEngine]:
    if not BUSYBOX.exists():
        pytest.skip("no static busybox to build a test image: apt-get install busybox-static")
    client = dockerd.client()
    try:
        client.api.import_image_from_data(busybox_tar(), repository=IMAGE.split(":")[0],
                                          tag=IMAGE.split(":")[1], changes=["ENV PATH=/bin"])
    finally:
        client.close()
    yield dockerd


@pytest.fixture
async def backend(engine: DockerEngine, tmp_path: Path) -> AsyncIterator[DockerBackend]:
    b = DockerBackend(tmp_path / "site", docker_host=engine.host, grace_s=1.0, poll_s=0.1)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.txt").write_text("from the bundle")
    return code


def spec(code: Path, entrypoint: str | list[str], rank: int = 0, **kw: Any) -> LaunchSpec:
    fields: dict[str, Any] = {
        "launch_id": make_launch_id("j1", "site-a", "client", rank, 0), "job": "j1",
        "study": "lung", "site": "site-a", "role": "client", "rank": rank,
        "entrypoint": entrypoint, "code_dir": str(code), "env": CONTRACT, "image": IMAGE,
        "platform": {"docker": {"network": "none"}}}
    fields.update(kw)
    return LaunchSpec(**fields)


async def run(backend: DockerBackend, s: LaunchSpec) -> tuple[Any, str]:
    handle = await backend.launch(s)
    ended = await backend.wait(handle)
    return ended, Path(handle.log_path).read_text()


async def test_the_container_gets_the_contract_its_code_and_read_only_data(
        backend: DockerBackend, code_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "ct"
    source.mkdir()
    (source / "scan.txt").write_text("lungs")
    script = ("env; echo ---; cat hello.txt; echo; cat $CAIRN_DATA/ct/scan.txt; echo; "
              "touch $CAIRN_DATA/ct/new 2>/dev/null && echo WROTE || echo READONLY; "
              "cat $DB_PASSWORD_FILE; echo; "
              "(echo x > $DB_PASSWORD_FILE) 2>/dev/null && echo SECRET-WRITABLE || echo SECRET-RO; "
              "echo out > result.txt")
    ended, log = await run(backend, spec(
        code_dir, ["sh", "-c", script], study_env={"TZ": "UTC", "CAIRN_JOB": "shadowed"},
        secret_env={"DB_PASSWORD": "s3cret"},
        datasets={"ct": DatasetMount(source=str(source), mode="ro")}))
    assert (ended.exit_code, ended.cause) == (0, None), log
    env_text, rest = log.split("---\n", 1)
    env = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    assert env["CAIRN_WORKDIR"] == "/cairn/work" and env["CAIRN_DATA"] == "/cairn/data"
    assert env["CAIRN_JOB"] == "j1" and env["TZ"] == "UTC"
    # The secret is a read-only file, never an environment value.
    assert "DB_PASSWORD" not in env and "s3cret" not in env_text
    assert env["DB_PASSWORD_FILE"] == "/cairn/secrets/DB_PASSWORD"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["CAIRN_ALLOCATION"] == "gpus=0;gpu_ids=;cpus=;memory=0"
    assert "CAIRN_TRACE_SPOOL" not in env  # the launcher does not trace here
    assert rest.split() == ["from", "the", "bundle", "lungs", "READONLY", "s3cret", "SECRET-RO"]
    assert not (source / "new").exists()
    # The working directory is the host's: what the worker wrote is there after it ended.
    workdir = tmp_path / "site" / "workers" / "j1_site-a_client_0_0"
    assert (workdir / "result.txt").read_text() == "out\n"


async def test_a_traced_workers_spans_are_sent_by_the_launcher(
        backend: DockerBackend, code_dir: Path, tmp_path: Path) -> None:
    """Inside the container the collector's address may mean nothing (127.0.0.1 is the
    container): the worker spools its spans in its mounted working directory, and the
    launcher, on the host, sends them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from cairn import tracespool
    from tools.otlp_receiver import OtlpReceiver

    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("test").start_as_current_span("in the container"):
        pass
    # What the SDK in the container would have spooled, written there by the container.
    tracespool.SpoolExporter(str(code_dir / "frames.bin")).export(memory.get_finished_spans())
    with OtlpReceiver() as receiver:
        env = {**CONTRACT, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        script = 'echo "$CAIRN_TRACE_SPOOL"; cat frames.bin > "$CAIRN_TRACE_SPOOL"'
        handle = await backend.launch(spec(code_dir, ["sh", "-c", script], env=env))
        ended = await backend.wait(handle)
        log = Path(handle.log_path).read_text()
        assert (ended.exit_code, ended.cause) == (0, None), log
        assert log.split() == ["/cairn/work/.cairn-spans"]
        assert tracespool.forward(tracespool.spool_path(handle.workdir),
                                 receiver.endpoint) == 1
        assert [s.name for s in receiver.spans()] == ["in the container"]


async def test_exit_codes_and_crashes(backend: DockerBackend, code_dir: Path) -> None:
    ok, _ = await run(backend, spec(code_dir, "true", rank=0))
    bad, _ = await run(backend, spec(code_dir, ["sh", "-c", "echo boom; exit 3"], rank=1))
    assert (ok.exit_code, ok.cause) == (0, None)
    assert (bad.exit_code, bad.cause) == (3, "crashed")


async def test_memory_over_the_limit_is_oom(backend: DockerBackend, code_dir: Path) -> None:
    hog = ["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"]
    ended, log = await run(backend, spec(code_dir, hog, memory_bytes=64 * 1024 * 1024))
    assert ended.cause == "oom", (ended, log)
    assert ended.exit_code == 137


async def test_cpus_are_pinned_and_capped(backend: DockerBackend, code_dir: Path,
                                          engine: DockerEngine) -> None:
    s = spec(code_dir, ["sleep", "30"], cpus=[0], millicpus=500)
    handle = await backend.launch(s)
    client = engine.client()
    try:
        config = client.containers.get(handle.native_id).attrs["HostConfig"]
    finally:
        client.close()
    await backend.cancel(handle, grace_s=0.5)
    assert config["CpusetCpus"] == "0" and config["NanoCpus"] == 500_000_000
    assert config["NetworkMode"] == "none"


# PID 1 of the container handles SIGTERM (records it, exits 143); with no handler a PID 1
# ignores SIGTERM and only the SIGKILL after the grace would stop it.
GRACEFUL = ("trap 'echo TERM > \"$CAIRN_WORKDIR/terminated\"; exit 143' TERM; "
            "echo ready; while true; do sleep 1; done")


async def test_cancel_stops_it_gracefully_and_a_stubborn_one_is_killed(
        backend: DockerBackend, code_dir: Path) -> None:
    polite = await backend.launch(spec(code_dir, ["sh", "-c", GRACEFUL], rank=0))
    stubborn = await backend.launch(spec(
        code_dir, ["sh", "-c", "trap '' TERM; echo ready; while true; do sleep 1; done"],
        rank=1))
    async with asyncio.timeout(120):  # a hang guard, not a measurement
        await asyncio.gather(backend.cancel(polite, grace_s=60.0),
                             backend.cancel(stubborn, grace_s=1.0))
        first, second = await backend.wait(polite), await backend.wait(stubborn)
    assert first.cause == second.cause == "cancelled"
    # The graceful one ended on the SIGTERM it handled, long before its 60 s grace...
    assert first.exit_code == 143
    assert (Path(polite.workdir) / "terminated").read_text().strip() == "TERM"
    assert second.exit_code == 137  # ...the stubborn one only by the SIGKILL after its grace


async def test_timeout_stops_the_worker(backend: DockerBackend, code_dir: Path) -> None:
    ended, _ = await run(backend, spec(code_dir, ["sleep", "60"], timeout_s=0.5))
    assert ended.cause == "timeout"


async def test_a_new_launcher_finds_running_and_ended_containers(
        engine: DockerEngine, code_dir: Path, tmp_path: Path) -> None:
    first = DockerBackend(tmp_path / "site", docker_host=engine.host, poll_s=0.1)
    running = await first.launch(spec(code_dir, ["sleep", "60"], rank=0))
    quick = await first.launch(spec(code_dir, ["sh", "-c", "echo done; exit 4"], rank=1))
    await first.close()  # the launcher goes away; the containers do not
    # The quick one ends while no launcher watches it: wait for the engine to say so.
    docker = engine.client()
    try:
        code = await asyncio.to_thread(
            lambda: docker.containers.get(quick.native_id).wait(timeout=30)["StatusCode"])
    finally:
        docker.close()
    assert code == 4

    second = DockerBackend(tmp_path / "site", docker_host=engine.host, poll_s=0.1)
    try:
        # As a launcher that died before recording it would: found by its label alone.
        found = await second.find(running.launch_id)
        assert found is not None and (found.native_id, found.workdir, found.log_path) == (
            running.native_id, running.workdir, running.log_path), found
        assert await second.find(running.launch_id.replace("/0/0", "/9/0")) is None
        assert await second.reattach(running) == running
        ended = await second.reattach(quick)
        assert not isinstance(ended, type(quick))
        assert (ended.exit_code, ended.cause) == (4, "crashed")
        assert Path(quick.log_path).read_text() == "done\n"
        # Its container is gone now; a third launcher still knows how it ended.
        third = DockerBackend(tmp_path / "site", docker_host=engine.host)
        again = await third.reattach(quick)
        await third.close()
        assert not isinstance(again, type(quick)) and again.exit_code == 4
        await second.cancel(running, grace_s=1.0)
        assert (await second.wait(running)).cause == "cancelled"
    finally:
        await second.close()


async def test_launch_refusals_are_clear(backend: DockerBackend, code_dir: Path,
                                         tmp_path: Path) -> None:
    with pytest.raises(LaunchFailed, match="not on this site's Docker Engine"):
        await backend.launch(spec(code_dir, "true", image="nowhere/none:0"))
    with pytest.raises(InvalidInput, match="needs an image"):
        await backend.launch(spec(code_dir, "true", image=""))
    with pytest.raises(InvalidInput, match="knows network, shm_size, user, runtime"):
        await backend.launch(spec(code_dir, "true", platform={"docker": {"privileged": True}}))
    with pytest.raises(LaunchFailed, match="refused the worker"):
        await backend.launch(spec(code_dir, "no-such-program"))
    assert list((tmp_path / "site" / "workers").iterdir()) == []  # nothing left behind
    retried = await backend.launch(spec(code_dir, "true"))  # the same launch id, now fine
    assert (await backend.wait(retried)).cause is None


async def test_logs_follow_until_the_container_ends(backend: DockerBackend,
                                                    code_dir: Path) -> None:
    script = "for i in 0 1 2 3; do echo line $i; sleep 0.2; done"
    handle = await backend.launch(spec(code_dir, ["sh", "-c", script]))
    text = b"".join([c async for c in backend.logs(handle, follow=True)]).decode()
    assert text.splitlines() == [f"line {i}" for i in range(4)]
    assert container_name(handle.launch_id) == "cairn-j1_site-a_client_0_0"
    assert json.dumps(handle.cpus) == "[]"


async def test_a_job_runs_in_a_container_at_a_docker_site(engine: DockerEngine,
                                                          tmp_path: Path) -> None:
    """End to end: a site whose site.yaml says `backend: docker` runs its part of a job as a
    container of the study's default image, with the study's docker settings."""
    import yaml

    from cairn import events as ev
    from cairn.client import Client
    from cairn.runtime.context import Context
    from cairn.runtime.embedded import DEFAULT_ADMIN, EmbeddedFederation
    from tests.integration.cp_helpers import study_events, write_job

    fed = EmbeddedFederation(dir=tmp_path / "fed", sites=("hub", "site-a"), heartbeat_s=0.2,
                             extra_env={"DOCKER_HOST": engine.host},
                             backends={"site-a": "docker"})
    runtime = fed.site_dir("site-a") / "local" / "study_runtime.yaml"
    runtime.parent.mkdir(parents=True)
    runtime.write_text(yaml.safe_dump({"format": 1, "studies": {"demo": {
        "images": {"default": IMAGE}, "docker": {"network": "none"}, "env": {"TZ": "UTC"},
        "limits": {"cpus": 2, "memory": "1Gi", "concurrent_jobs": 2}}}}))
    script = "echo site=$CAIRN_SITE role=$CAIRN_ROLE work=$CAIRN_WORKDIR tz=$TZ; cat main.py"
    fed.start()
    try:
        await fed.wait_healthy(60)
        assert fed.nats is not None
        client = await Client.connect(Context(nats_url=fed.nats.url, study="demo",
                                              actor=DEFAULT_ADMIN, **fed.client_options()))
        try:
            roles = ("roles:\n  client:\n"
                     f"    entrypoint: \"sh -c '{script}'\"\n"
                     "    sites: [site-a]\n    resources: {cpus: 1, memory: 64Mi}\n")
            job = await client.submit(write_job(tmp_path / "job", script="# the bundle\n",
                                                roles=roles))
            final = await client.wait(job, timeout=60)
            log = b"".join([c.data async for c in client.logs(job)]).decode()
        finally:
            await client.close()
        launching = [e for e in await study_events(fed, job=job)
                     if isinstance(e, ev.WorkerLaunching)]
    finally:
        fed.stop()
    assert final.state == "completed", (final, log)
    assert "site=site-a role=client work=/cairn/work tz=UTC" in log
    assert "# the bundle" in log
    assert [(e.site, e.backend) for e in launching] == [("site-a", "docker")]
