"""The `slurm` backend: each worker is one Slurm batch job (one task per node).

    site.yaml: backend: slurm
               slurm: {driver: cli}                                  # on a login node
               slurm: {driver: rest, url: unix:/run/slurmrestd.sock, user: cairn,
                       token_file: /etc/cairn/slurm.jwt}             # off it

The working directory (`<workdir>/workers/<launch id>/`, as for the process backend) must be on
a filesystem the compute nodes share: the batch script (`.cairn/job.sh`) runs there and writes
`worker.log` there. The job is tagged `--comment=cairn:<launch id>`; a restarted launcher checks
the tag before it adopts a job id again.

Status: one `squeue --json` (or `GET /jobs`) per poll for every watched job; a job the
controller has forgotten (`MinJobAge` passed) is looked up in `sacct` (slurmdbd), the
authority then. Ended jobs map to causes in `states.classify`. Slurm enforces the time limit
(`--time`, whole minutes from the job's start); cancel sends SIGTERM to every process of the
job, and `scancel` (SIGKILL after the cluster's `KillWait`) once `grace_s` has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cairn.errors import CairnError, InvalidInput
from cairn.launcher.backends._env import (
    GpuIds,
    WorkerPlatform,
    host_start_env,
    worker_environment,
)
from cairn.launcher.backends._watching import (
    already_known,
    find_watch,
    stream_log,
    wait_stopped,
    wait_watched,
)
from cairn.launcher.backends._workdir import (
    CONTROL_DIR,
    LOG_NAME,
    data_dir,
    dir_name,
    prepare_workdir,
    read_chunk,
    remove_secrets,
    secrets_dir,
    split_entrypoint,
)
from cairn.launcher.backends.base import (
    Capability,
    ExitCause,
    LaunchHandle,
    LaunchSpec,
    WorkerExit,
)
from cairn.launcher.backends.slurm.cli import CliDriver
from cairn.launcher.backends.slurm.driver import SlurmDriver, SlurmUnavailable
from cairn.launcher.backends.slurm.rest import RestDriver
from cairn.launcher.backends.slurm.script import TAG_PREFIX, build_request
from cairn.launcher.backends.slurm.states import JobStatus, classify
from cairn.spec.site import SlurmCluster

__all__ = ["SlurmBackend"]

log = logging.getLogger(__name__)
SCRIPT_NAME = "job.sh"
# A job the controller and the accounting both do not know yet right after sbatch: how long
# to keep asking before calling it lost.
UNKNOWN_GRACE_S = 30.0


@dataclass
class _Watch:
    handle: LaunchHandle
    cancelled: bool = False
    unknown_since: float | None = None
    last: JobStatus | None = None
    done: asyncio.Future[WorkerExit] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Future[WorkerExit] | None = None


class SlurmBackend:
    """Workers as Slurm batch jobs.

    Args:
        workdir: The site workdir (shared with the compute nodes).
        driver: `cli` (Slurm commands on this host) or `rest` (slurmrestd); or a driver.
        url, user, token, token_file, jwt_key: The REST driver's (see `RestDriver`).
        timeout_s: Bound on each call to the cluster.
        poll_s: How often the watches look at the cluster.
        env: Environment of the Slurm commands (`SLURM_CONF`); default the launcher's.
        cluster: site.yaml's `slurm:` section; when given, it sets all of the above.
    """

    name = "slurm"

    def __init__(self, workdir: str | Path, *, driver: str | SlurmDriver = "cli",
                 url: str | None = None, user: str | None = None, token: str | None = None,
                 token_file: str | None = None, jwt_key: str | None = None,
                 timeout_s: float = 30.0, poll_s: float = 1.0,
                 env: Mapping[str, str] | None = None,
                 cluster: SlurmCluster | None = None) -> None:
        if cluster is not None:
            driver, url, user = cluster.driver, cluster.url, cluster.user
            token_file, jwt_key = cluster.token_file, cluster.jwt_key
            timeout_s, poll_s = cluster.timeout, cluster.poll
            if cluster.slurm_conf:
                env = {**(env if env is not None else os.environ),
                       "SLURM_CONF": cluster.slurm_conf}
        self.root = Path(workdir)
        self.poll_s = poll_s
        self.driver = _make_driver(driver, url=url, user=user, token=token,
                                   token_file=token_file, jwt_key=jwt_key,
                                   timeout_s=timeout_s, env=env)
        self.capabilities = (Capability.GPU | Capability.MULTI_NODE | Capability.CANCEL
                             | Capability.RECONCILE | Capability.MEMORY_LIMIT)
        self._watches: dict[str, _Watch] = {}
        self._ended: dict[str, WorkerExit] = {}
        self._poller: asyncio.Task[None] | None = None

    # -- the Backend protocol -------------------------------------------------------------

    async def launch(self, spec: LaunchSpec) -> LaunchHandle:
        """Prepare the working directory, write the batch script and submit it.

        Raises:
            InvalidInput: a bad entrypoint or slurm setting.
            Conflict: this launch id was launched before (reattach instead).
            LaunchFailed: missing code or dataset; Slurm refused the job.
            SlurmUnavailable: the cluster did not answer.
        """
        argv = split_entrypoint(spec.entrypoint)
        workdir = await asyncio.to_thread(prepare_workdir, spec, self.root, secrets=True)
        try:
            # A batch job runs on the cluster's nodes with the site's paths; Slurm picks its
            # GPUs (and sets CUDA_VISIBLE_DEVICES for them); it exports its spans itself.
            env = worker_environment(spec, WorkerPlatform(
                workdir=str(workdir), data=str(data_dir(workdir)),
                secrets=str(secrets_dir(workdir)), gpu_ids=GpuIds.PLATFORM,
                start=host_start_env(sys.executable, home=str(workdir))))
            request = build_request(spec, argv, env, str(workdir), str(workdir / LOG_NAME))
            script = workdir / CONTROL_DIR / SCRIPT_NAME
            await asyncio.to_thread(_write_script, script, request.script)
            try:
                job_id = await self.driver.submit(request, str(script))
            except SlurmUnavailable:
                # A submit that timed out may still have been accepted: find it by its tag
                # rather than leave a job running that nobody watches.
                job_id = await self._submitted(spec.launch_id)
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, workdir, True)
            raise
        handle = LaunchHandle(
            launch_id=spec.launch_id, backend=self.name, native_id=job_id,
            workdir=str(workdir), log_path=str(workdir / LOG_NAME), started_at=datetime.now(UTC),
            memory_limit="slurm" if spec.memory_bytes else "none", timeout_s=spec.timeout_s)
        self._start_watch(handle)
        return handle

    async def wait(self, handle: LaunchHandle) -> WorkerExit:
        """Wait for the job to end and say how it ended."""
        return await wait_watched(self, handle)

    async def cancel(self, handle: LaunchHandle, grace_s: float) -> None:
        """SIGTERM to every process of the job; `scancel` after `grace_s`; returns once the
        job has ended (bounded)."""
        watch = await find_watch(self, handle)
        if isinstance(watch, WorkerExit):
            return
        watch.cancelled = True
        job = handle.native_id
        pending = watch.last is not None and watch.last.state == "PENDING"
        if not pending and grace_s > 0:
            try:
                await self.driver.cancel(job, signal="TERM")
            except SlurmUnavailable as exc:
                # Slurm refuses to signal a job that has not started yet: scancel it.
                log.info("slurm: SIGTERM to job %s refused (%s); cancelling it", job, exc)
            else:
                await wait_stopped(watch.done, grace_s)
        if not watch.done.done():
            await self.driver.cancel(job)
        await wait_stopped(watch.done, 60.0 + 4 * self.poll_s)

    async def reattach(self, handle: LaunchHandle) -> LaunchHandle | WorkerExit:
        """After a launcher restart: the handle while its job runs (or pends), else how it
        ended (from the controller, or from sacct once the controller forgot it)."""
        known = already_known(self, handle)
        if known is not None:
            return known
        try:
            status = await self._look_up(handle.native_id)
        except SlurmUnavailable as exc:
            # The controller is down or slow: the job goes on; the watch keeps asking.
            log.warning("slurm: cannot look up job %s yet (%s); watching it", handle.native_id,
                        exc)
            self._start_watch(handle)
            return handle
        if status is not None and _not_ours(status, handle.launch_id):
            return self._finish(_Watch(handle=handle), None, _foreign(status))
        if status is None or not status.active:
            return self._finish(_Watch(handle=handle), status)
        self._start_watch(handle, status)
        return handle

    async def find(self, launch_id: str) -> LaunchHandle | None:
        """The job a launcher submitted for `launch_id` but never recorded (it died in
        between), found by its ownership tag among the controller's jobs; None when there is
        none (then it never reached Slurm, or ended long enough ago to be forgotten).

        Raises:
            SlurmUnavailable: the controller did not answer.
        """
        tag = TAG_PREFIX + launch_id
        found = sorted((s for s in (await self.driver.jobs()).values() if s.comment == tag),
                       key=lambda s: (not s.active, s.job_id))
        if not found:
            return None
        workdir = self.root / "workers" / dir_name(launch_id)
        return LaunchHandle(launch_id=launch_id, backend=self.name, native_id=found[0].job_id,
                            workdir=str(workdir), log_path=str(workdir / LOG_NAME),
                            started_at=datetime.now(UTC), memory_limit="slurm")

    async def logs(self, handle: LaunchHandle, *, follow: bool = False) -> AsyncIterator[bytes]:
        """The job's output (`worker.log` on the shared filesystem)."""
        def read(offset: int) -> Any:
            return asyncio.to_thread(read_chunk, Path(handle.log_path), offset)

        async for chunk in stream_log(read, lambda: handle.launch_id in self._watches,
                                      follow=follow, poll_s=self.poll_s):
            yield chunk

    async def close(self) -> None:
        """Stop watching; the jobs keep running, for a restarted launcher to find."""
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        for watch in self._watches.values():
            if not watch.done.done():
                watch.done.cancel()
        self._watches.clear()
        await self.driver.close()

    # -- internals ------------------------------------------------------------------------

    async def status(self, handle: LaunchHandle) -> JobStatus | None:
        """The job as Slurm sees it now (for operators and tests): None when unknown."""
        return await self._look_up(handle.native_id)

    async def _submitted(self, launch_id: str) -> str:
        """The job id of a submit whose answer was lost, found by its ownership tag.

        Raises:
            SlurmUnavailable: the cluster still does not answer, or holds no such job.
        """
        tag = TAG_PREFIX + launch_id
        try:
            found = [s.job_id for s in (await self.driver.jobs()).values() if s.comment == tag]
        except SlurmUnavailable as exc:
            raise SlurmUnavailable(f"the submit of {launch_id} got no answer, and the cluster "
                                   f"cannot be asked whether it arrived: {exc}") from exc
        if not found:
            raise SlurmUnavailable(f"the submit of {launch_id} got no answer and no job of it "
                                   "is queued")
        return found[0]

    async def _look_up(self, job_id: str) -> JobStatus | None:
        status = (await self.driver.jobs()).get(job_id)
        if status is None:
            status = await self.driver.accounting(job_id)
        return status

    def _start_watch(self, handle: LaunchHandle, status: JobStatus | None = None) -> None:
        watch = _Watch(handle=handle, last=status)
        watch.task = watch.done
        self._watches[handle.launch_id] = watch
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="slurm poll")

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        while self._watches:
            try:
                listed = await self.driver.jobs()
                for watch in list(self._watches.values()):
                    await self._step(watch, listed.get(watch.handle.native_id), loop.time())
            except SlurmUnavailable as exc:
                # A controller restart or a slow slurmrestd: the jobs go on; keep asking.
                log.warning("slurm: %s", exc)
            except CairnError as exc:
                log.warning("slurm: %s", exc)
            await asyncio.sleep(self.poll_s)

    async def _step(self, watch: _Watch, status: JobStatus | None, now: float) -> None:
        if status is None:
            status = await self.driver.accounting(watch.handle.native_id)
        if status is None:
            watch.unknown_since = watch.unknown_since or now
            if now - watch.unknown_since > UNKNOWN_GRACE_S:
                self._finish(watch, None)
            return
        watch.unknown_since = None
        if _not_ours(status, watch.handle.launch_id):
            self._finish(watch, None, _foreign(status))
            return
        watch.last = status
        if not status.active:
            self._finish(watch, status)

    def _finish(self, watch: _Watch, status: JobStatus | None,
                message: str | None = None) -> WorkerExit:
        handle = watch.handle
        cause: ExitCause | None
        if status is None:
            code, cause = None, "infrastructure"
            text = message or (f"Slurm job {handle.native_id} is unknown to the controller and "
                               "to the accounting (no slurmdbd?): its end was not seen")
        else:
            code, cause, text = classify(status, cancelled=watch.cancelled)
            text = f"Slurm job {handle.native_id}: {text}"
        ended = WorkerExit(launch_id=handle.launch_id, exit_code=code, cause=cause,
                           message=text, ended_at=datetime.now(UTC))
        self._ended[handle.launch_id] = ended
        self._watches.pop(handle.launch_id, None)
        # Its secrets live only as long as it does (the shared filesystem is no vault).
        remove_secrets(secrets_dir(handle.workdir))
        if not watch.done.done():
            watch.done.set_result(ended)
        return ended


def _not_ours(status: JobStatus, launch_id: str) -> bool:
    """The job id now names another job (ids restart after a cluster reset). An accounting
    record without a comment (no `AccountingStoreFlags=job_comment`) is given the benefit."""
    if status.comment == TAG_PREFIX + launch_id:
        return False
    return bool(status.comment) or not status.from_accounting


def _foreign(status: JobStatus) -> str:
    return (f"Slurm job {status.job_id} is not this worker's any more (its comment is "
            f"{status.comment!r})")


def _write_script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o700)


def _make_driver(driver: str | SlurmDriver, *, url: str | None, user: str | None,
                 token: str | None, token_file: str | None, jwt_key: str | None,
                 timeout_s: float, env: Mapping[str, str] | None) -> SlurmDriver:
    if not isinstance(driver, str):
        return driver
    if driver == "cli":
        return CliDriver(timeout_s=timeout_s, env=env)
    if driver == "rest":
        if not url:
            raise InvalidInput("the slurm rest driver needs url (unix:/path or http://host:port)",
                               field="slurm.url")
        return RestDriver(url, user=user or _login_name(), token=token, token_file=token_file,
                          jwt_key=jwt_key, timeout_s=timeout_s)
    raise InvalidInput(f"slurm driver {driver!r}: use cli or rest", field="slurm.driver")


def _login_name() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name
