"""The worker SDK: what job code imports.

    from cairn.worker import Worker, main

    async def run(w: Worker) -> None:
        await w.progress(1, 3, "training")
        await w.metric(1, loss=0.3)
        await w.send("server", 0, "update", {"weights": arr})
        await w.result({"accuracy": 0.9}, files=["model.npz"])

    main(run)

A worker is built from the environment the launcher sets (the contract in DESIGN.md):
`CAIRN_NATS_URL`, `CAIRN_STUDY`, `CAIRN_JOB`, `CAIRN_SITE`, `CAIRN_ROLE`, `CAIRN_RANK`,
`CAIRN_ATTEMPT`, `CAIRN_WORKDIR`, `CAIRN_DATA`, `CAIRN_PARAMS` (JSON) and `TRACEPARENT`;
`CAIRN_ALLOCATION` says what the site allocated, and `Worker.from_env()` proves it before the
job's code runs (`cairn.worker.allocation`: on a GPU mismatch the process exits 78).

The SDK never reports a user's error over the bus: an exception ends the process non-zero
with its traceback in the worker's log, and the launcher reports the exit (cause `crashed`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import io
import json
import os
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from cairn import subjects, telemetry
from cairn.bus import Bus, decode_event, job_files, replay
from cairn.errors import CairnError, InvalidInput, NotFound
from cairn.events import (
    STUDY_DECODER,
    Deployment,
    DeploymentAccepted,
    EventEnvelope,
    JobDispatched,
    JobSubmitted,
    ReportFields,
    ResultFile,
    WorkerExited,
    WorkerMetric,
    WorkerProgress,
    WorkerRef,
    WorkerResult,
    event_envelope,
)
from cairn.worker.allocation import prove_allocation
from cairn.worker.dataplane import DataPlane, Handler, Message, RemoteError

__all__ = ["Message", "RemoteError", "Worker", "WorkerEnvError", "main"]

T = TypeVar("T")
REQUIRED = ("CAIRN_NATS_URL", "CAIRN_STUDY", "CAIRN_JOB", "CAIRN_SITE", "CAIRN_ROLE")


class ReportStart(EventEnvelope, ReportFields):
    """What each of a worker's reports starts with: the envelope and who it is."""


class WorkerEnvError(InvalidInput):
    """The process was not started by a Cairn launcher (the CAIRN_* contract is missing)."""


class Worker:
    """One worker of a job: its identity, its events and its end of the data plane.

    Use as `async with Worker.from_env() as w:` (connects, and listens on the data plane).
    """

    def __init__(self, *, nats_url: str, study: str, job: str, site: str, role: str,
                 rank: int = 0, attempt: int = 0, workdir: Path | None = None,
                 data_dir: Path | None = None, params: Mapping[str, Any] | None = None,
                 traceparent: str | None = None, connect_timeout: float = 30.0) -> None:
        self.nats_url = nats_url
        self.study = study
        self.ref = WorkerRef(job=job, site=site, role=role, rank=rank, attempt=attempt)
        """Which worker attempt this is (`job`, `site`, `role`, `rank`, `attempt` read it)."""
        self.workdir = workdir or Path.cwd()
        self.data_dir = data_dir or self.workdir / "data"
        self.params: dict[str, Any] = dict(params or {})
        self.traceparent = traceparent
        self.connect_timeout = connect_timeout
        self._bus: Bus | None = None
        self._data: DataPlane | None = None
        self.exited: dict[tuple[str, int], WorkerExited] = {}
        self.exits_changed = asyncio.Event()
        self.deployments: list[Deployment] = []
        self.submitted: JobSubmitted | None = None
        """The job as submitted (its workflow, roles, params), once `watch_job` ran."""
        self.accepted: DeploymentAccepted | None = None
        """This worker's acceptance by its site's agent (with the privacy filters the site
        enforces), once `watch_job` ran."""
        self._exit_sub: Any = None

    @property
    def job(self) -> str:
        return self.ref.job

    @property
    def site(self) -> str:
        return self.ref.site

    @property
    def role(self) -> str:
        return self.ref.role

    @property
    def rank(self) -> int:
        return self.ref.rank

    @property
    def attempt(self) -> int:
        return self.ref.attempt

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Worker:
        """The worker the launcher started (reads the CAIRN_* contract).

        Raises:
            WorkerEnvError: a required variable is missing or malformed.
        """
        env = os.environ if environ is None else environ
        if environ is None:
            # Before any of the job's code: a worker on the wrong GPUs ends here, exit 78.
            _prove_allocation_once()
        missing = [k for k in REQUIRED if not env.get(k)]
        if missing:
            raise WorkerEnvError(
                f"not started by a Cairn launcher: {', '.join(missing)} not set (a worker's "
                "environment is CAIRN_NATS_URL, CAIRN_STUDY, CAIRN_JOB, CAIRN_SITE, CAIRN_ROLE, "
                "CAIRN_RANK, CAIRN_ATTEMPT, CAIRN_WORKDIR, CAIRN_DATA, CAIRN_PARAMS)")
        try:
            params = json.loads(env.get("CAIRN_PARAMS") or "{}")
            rank, attempt = int(env.get("CAIRN_RANK", "0")), int(env.get("CAIRN_ATTEMPT", "0"))
        except ValueError as exc:
            raise WorkerEnvError(f"malformed CAIRN_* variable: {exc}") from None
        if not isinstance(params, dict):
            raise WorkerEnvError("CAIRN_PARAMS is not a JSON object", field="CAIRN_PARAMS")
        workdir = Path(env.get("CAIRN_WORKDIR") or os.getcwd())
        return cls(nats_url=env["CAIRN_NATS_URL"], study=env["CAIRN_STUDY"],
                   job=env["CAIRN_JOB"], site=env["CAIRN_SITE"], role=env["CAIRN_ROLE"],
                   rank=rank, attempt=attempt, workdir=workdir,
                   data_dir=Path(env.get("CAIRN_DATA") or workdir / "data"), params=params,
                   traceparent=env.get("TRACEPARENT") or None)

    def secret(self, name: str) -> str:
        """A secret the site gave this worker (study_runtime.yaml `secret_env`).

        Secrets are files, never environment values: `<NAME>_FILE` holds the path of a
        read-only file with the value (`/cairn/secrets/<NAME>` in a container).

        Raises:
            NotFound: the site gave no such secret, or its file is gone.
        """
        path = os.environ.get(f"{name}_FILE")
        if not path:
            raise NotFound(f"no secret {name!r}: the site's study_runtime.yaml gives this "
                           f"study no secret_env {name} ({name}_FILE is not set)")
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise NotFound(f"secret {name!r}: cannot read {path}: {exc.strerror}") from None

    # -- connection ----------------------------------------------------------------------

    async def __aenter__(self) -> Worker:
        await self.connect()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def connect(self) -> None:
        from cairn.trust.connect import worker_credentials

        creds, tls = worker_credentials(os.environ)
        self._bus = await Bus.connect(self.nats_url, retry_for=self.connect_timeout,
                                      name=f"worker-{self.job}-{self.role}-{self.rank}",
                                      creds=creds, tls=tls)
        self._data = DataPlane(self._bus, study=self.study, job=self.job, site=self.site,
                               role=self.role, rank=self.rank)
        await self._data.start()

    async def close(self) -> None:
        if self._data is not None:
            await self._data.close()
        if self._exit_sub is not None:
            await self._exit_sub.unsubscribe()
        if self._bus is not None:
            await self._bus.close()
        self._bus = self._data = self._exit_sub = None

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise CairnError("the worker is not connected: use `async with Worker.from_env()`")
        return self._bus

    @property
    def data(self) -> DataPlane:
        if self._data is None:
            raise CairnError("the worker is not connected: use `async with Worker.from_env()`")
        return self._data

    # -- events --------------------------------------------------------------------------

    def _who(self) -> ReportStart:
        return {**event_envelope(f"worker@{self.site}", study=self.study),
                **self.ref.report_fields()}

    async def progress(self, step: int | None = None, total: int | None = None,
                       message: str = "") -> None:
        """Say how far the work is (`cairn job show` displays the latest)."""
        await self.bus.publish(WorkerProgress(**self._who(), step=step, total=total,
                                              message=message))

    async def metric(self, step: int | None = None, **values: float) -> None:
        """Record numbers for a step: `await w.metric(3, accuracy=0.91, loss=0.2)`."""
        await self.bus.publish(WorkerMetric(**self._who(), step=step,
                                            values={k: float(v) for k, v in values.items()}))

    async def result(self, value: Any = None, files: Iterable[str | Path] = ()) -> WorkerResult:
        """Return the worker's result: a JSON value and files, stored with the job's files
        under their sha256 (`cairn job fetch` downloads them)."""
        store = job_files(self.bus, self.study, self.job)
        stored = []
        for f in files:
            path = Path(f)
            digest = await store.put_file(path)  # streamed: a model need not fit in memory
            stored.append(ResultFile(name=path.name, digest=digest, size=path.stat().st_size))
        event = WorkerResult(**self._who(), value=value, files=stored)
        await self.bus.publish(event)
        return event

    # -- data plane ----------------------------------------------------------------------

    async def send(self, role: str, rank: int, topic: str, payload: Any) -> str:
        """Send to one worker of this job (bytes, or objects with numpy arrays)."""
        return await self.data.send(role, rank, topic, payload)

    async def broadcast(self, topic: str, payload: Any) -> str:
        """Send to every other worker of this job."""
        return await self.data.broadcast(topic, payload)

    async def receive(self, topic: str, timeout: float = 60.0) -> Message:
        """The next message on `topic` (raises `cairn.errors.Timeout`)."""
        return await self.data.receive(topic, timeout)

    async def poll(self, topic: str) -> Message | None:
        """The next message on `topic` if one is already here, else None."""
        return await self.data.poll(topic)

    async def request(self, role: str, rank: int, topic: str, payload: Any,
                      timeout: float = 60.0) -> Message:
        """Ask one worker, wait for its answer (`Timeout`, or `RemoteError` if it failed)."""
        return await self.data.request(role, rank, topic, payload, timeout)

    def serve(self, topic: str, handler: Handler) -> None:
        """Answer requests on `topic`: `handler(message)` returns the reply's payload."""
        self.data.serve(topic, handler)

    # -- peers ---------------------------------------------------------------------------

    async def watch_job(self, timeout: float = 10.0) -> None:
        """Track this job's control-plane facts: the job as submitted (`self.submitted`),
        this worker's acceptance (`self.accepted`), who was deployed (`self.deployments`, from
        the coordinator's `dispatched`) and who exited (`self.exited`, `self.exits_changed`,
        from the launchers). A server learns its clients and a client's death from them,
        without waiting for a round's timeout."""
        if self._exit_sub is not None:
            return

        def note(event: Any) -> None:
            if isinstance(event, WorkerExited):
                self.exited[(event.role, event.rank)] = event
                self.exits_changed.set()
            elif isinstance(event, JobDispatched):
                self.deployments = list(event.deployments)
            elif isinstance(event, JobSubmitted):
                self.submitted = event
            elif isinstance(event, DeploymentAccepted) and (
                    event.site, event.role, event.rank, event.attempt) == (
                    self.site, self.role, self.rank, self.attempt):
                self.accepted = event

        async def on_msg(msg: Any) -> None:
            event = decode_event(STUDY_DECODER, msg)  # a site speaks for its own workers
            if event is not None:
                note(event)

        # Subscribe first, then read what came before: nothing falls in between.
        subject = subjects.job_all(self.study, self.job)
        self._exit_sub = await self.bus.subscribe_core(subject, on_msg)
        stream = subjects.study_stream(self.study).name

        async def catch_up() -> None:
            async for r in replay(self.bus, stream, STUDY_DECODER, filters=[subject]):
                note(r.event)

        await asyncio.wait_for(catch_up(), timeout)


_proved: list[bool] = []


def _prove_allocation_once() -> None:
    if not _proved:
        prove_allocation()  # exits on a mismatch
        _proved.append(True)


def main(fn: Callable[[Worker], Awaitable[Any]]) -> None:
    """Run `fn(worker)` for the worker the launcher started, then exit.

    Exit 0 when `fn` returns; on any error, print the traceback (it lands in the worker's
    log) and exit 1, so the launcher reports the worker as crashed. A missing environment
    exits 2 with one line saying what is missing.

    A worker that returned ends at once (`os._exit`), without the interpreter's teardown,
    which takes longer than a round of FedAvg once numpy is loaded: first the `atexit`
    handlers run (logging's among them) and every open file is flushed. It ends the usual
    way while a non-daemon thread of the job still runs.
    """
    try:
        worker = Worker.from_env()
    except WorkerEnvError as exc:
        print(f"cairn.worker: {exc}", file=sys.stderr)
        sys.exit(2)

    attributes: dict[str, str | int] = {
        "cairn.study": worker.study, "cairn.job": worker.job, "cairn.site": worker.site,
        "cairn.role": worker.role, "cairn.rank": worker.rank}
    # With an OTLP endpoint from the launcher, the worker's spans join the job's trace
    # (TRACEPARENT); without one, or when the job's trace is not sampled, OpenTelemetry is
    # never set up. (Set up here, not in a thread while the worker connects: the thread's
    # hold on the GIL slowed the connection by more than the setup takes.)
    # A launcher that can forward them has the spans spooled to a file (see
    # cairn.tracespool): the worker then ends without waiting on the collector.
    traced = telemetry.setup("cairn-worker", site=worker.site, parent=telemetry.env_headers(),
                             attributes=attributes, spool=os.environ.get("CAIRN_TRACE_SPOOL"))

    async def run() -> None:
        with telemetry.continued(telemetry.env_headers(), f"worker {worker.role}",
                                 **attributes):
            async with worker:
                await fn(worker)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        traceback.print_exc()
        print(f"cairn.worker: {worker.role}/{worker.rank} at {worker.site} failed: {exc}",
              file=sys.stderr, flush=True)
        sys.exit(1)
    finally:
        if traced:
            # The worker's spans go out before it ends (a collector that does not answer holds
            # it a second at most).
            telemetry.shutdown(timeout_s=1.0)
    _exit_now(0)


def _exit_now(code: int) -> None:
    """Exit without tearing the interpreter down, once nothing else would run in it."""
    if any(t.is_alive() and not t.daemon and t is not threading.main_thread()
           for t in threading.enumerate()):
        sys.exit(code)  # Python joins those threads first; so do we
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):  # a warm worker's are frozen out of get_objects
        with contextlib.suppress(Exception):
            stream.flush()
    for obj in gc.get_objects():
        # What teardown would have flushed: files a job left open.
        if isinstance(obj, (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)):  # noqa: UP038
            with contextlib.suppress(Exception):
                if not obj.closed:
                    obj.flush()
    os._exit(code)
