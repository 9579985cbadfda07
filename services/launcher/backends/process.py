"""The `process` backend: each worker is a local process, in its own session and directory.

The worker runs under `_exitwrap.py` (see there) as the leader of a new session, so one
`killpg` reaches everything it started, and its end is recorded in `.cairn/exit.json` even when
the launcher is down. One watch task per worker waits for it, enforces its timeout, and
classifies its end; `wait` and `cancel` share that task, so only one place reaps. The watch
wakes the moment the worker exits (a pidfd in the event loop, where the kernel has them) and
also looks every `poll_s`, which bounds how late a deadline is noticed.

Timeouts count from `LaunchHandle.started_at` (wall clock), so a restarted launcher keeps
enforcing them; a worker that overran while the launcher was down is stopped on reattach.

Secrets: each `secret_env` value is a 0400 file in the worker's private (0700)
`.cairn/secrets/`, named by `<NAME>_FILE` in its environment, and deleted when it ends. The
worker proves its allocation (`CAIRN_ALLOCATION`) before its code runs.

Isolation (`_isolation.py`): job code is hostile. Where the site allows, each worker runs in
a bubblewrap sandbox that shows it only the interpreter, its own folder and its datasets, in
a pid namespace of its own, and under a uid of its own; warm workers join the same sandbox
(`_nsjoin.py`). A site that can do neither runs only studies marked `trusted_code: true`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from cairn import tracespool
from cairn.errors import InvalidInput
from cairn.launcher.backends import _handles, _proc
from cairn.launcher.backends._cpus import pick_cpus
from cairn.launcher.backends._env import GpuIds, WorkerPlatform, host_start_env, worker_environment
from cairn.launcher.backends._exitcause import Observed, classify
from cairn.launcher.backends._isolation import Isolation, choose, prepare_isolated
from cairn.launcher.backends._memlimit import (
    MECHANISMS,
    Mechanism,
    MemoryLimit,
    apply_memory_limit,
    memory_limit_mechanism,
    oom_kills,
    remove_cgroup,
)
from cairn.launcher.backends._sandbox import Protected
from cairn.launcher.backends._spawn import start_worker
from cairn.launcher.backends._uids import UidPool
from cairn.launcher.backends._warm import (
    Zygote,
    enabled_by_env,
    inherited_socket,
    release_zygote,
    shared_zygote,
    zygote_env,
)
from cairn.launcher.backends._watching import (
    already_known,
    find_watch,
    stop_watching,
    stream_log,
    wait_stopped,
    wait_watched,
)
from cairn.launcher.backends._workdir import (
    LOG_NAME,
    data_dir,
    dir_name,
    read_allocation_mismatch,
    read_chunk,
    read_outcome,
    remove_secrets,
    secrets_dir,
    take_back,
    worker_argv,
)
from cairn.launcher.backends.base import (
    Capability,
    LaunchHandle,
    LaunchSpec,
    WorkerExit,
)
from cairn.worker.allocation import MISMATCH_EXIT

__all__ = ["ProcessBackend", "memory_limit_mechanism"]

# After SIGKILL a process is gone in milliseconds unless stuck in the kernel (D state);
# past this we stop waiting and report it rather than wait forever.
KILL_WAIT_S = 30.0


@dataclass
class _Watch:
    """One worker being watched; times are `loop.time()`."""

    handle: LaunchHandle
    pid: int
    deadline: float | None
    kill_at: float | None = None
    give_up_at: float | None = None
    cancelled: bool = False
    timed_out: bool = False
    killed: bool = False  # we sent SIGKILL to its group
    task: asyncio.Task[WorkerExit] | None = None
    exited: asyncio.Event | None = None  # set when it ends, where pidfds work


def isolation_for(workdir: str | Path, *, python: str | None = None, sandbox: str = "auto",
                  worker_uids: str = "auto", read_only: tuple[str, ...] | list[str] = (),
                  protected: tuple[str, ...] | list[str] = ()) -> Isolation:
    """The isolation a process backend with these settings gives its workers, probed here
    (blocking: bwrap starts an interpreter, see `_isolation.choose`; its errors too)."""
    root = Path(workdir).absolute()
    return choose(sandbox, worker_uids, python=python or sys.executable, workdir=root,
                  read_only=tuple(read_only), protected=Protected.of([*protected, root]))


class ProcessBackend:
    """Workers as local processes.

    Args:
        workdir: The site workdir; workers go under `<workdir>/workers/`.
        grace_s: Time between SIGTERM and SIGKILL when a timeout stops a worker.
        memory_limit: `auto` (the strongest that works, see `memory_limit_mechanism`) or one
            of `cgroup-v2`, `cgroup-v1`, `rlimit-as`, `none`.
        python: The interpreter that runs workers' `python` and the wrapper.
        poll_s: How often a watch looks at its worker (it also wakes when the worker ends).
        warm: Start Python workers from a warm interpreter (`_warm.py`) where that changes
            nothing but the start time; `CAIRN_WARM_WORKERS=0` turns it off.
        sandbox: `auto` (bwrap where it works here), `bwrap` (required) or `none`.
        worker_uids: `auto` (a uid of its own per worker, as root), `none`, or `FIRST-LAST`.
        read_only: More host paths sandboxed workers may read.
        protected: Paths no worker may see (the launcher's credentials, its config, ...);
            the site workdir is always one.
        isolation: What `isolation_for` settled for these same settings, where the caller
            probed ahead (the launcher does, while its parent connects); else probed here.
    """

    name = "process"
    spools_traces = True  # its workers write cairn.tracespool.spool_path(workdir)

    def __init__(
        self,
        workdir: str | Path,
        *,
        grace_s: float = 10.0,
        memory_limit: str = "auto",
        python: str | None = None,
        poll_s: float = 0.25,
        warm: bool = False,
        sandbox: str = "auto",
        worker_uids: str = "auto",
        read_only: tuple[str, ...] | list[str] = (),
        protected: tuple[str, ...] | list[str] = (),
        isolation: Isolation | None = None,
    ) -> None:
        self.root = Path(workdir).absolute()  # the sandbox mounts by absolute path
        # Cgroups are the host's, shared by every launcher on it: a worker's is named by its
        # site's folder too, so two launchers never share (and remove) one.
        self._cgroup_prefix = hashlib.sha256(str(self.root).encode()).hexdigest()[:8]
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.python = python or sys.executable
        if memory_limit == "auto":
            self.memory_mechanism: Mechanism = memory_limit_mechanism()
        elif memory_limit in MECHANISMS:
            self.memory_mechanism = memory_limit
        else:
            raise InvalidInput(
                f"memory_limit {memory_limit!r}: use auto or one of {', '.join(MECHANISMS)}",
                field="memory_limit",
            )
        self.capabilities = (
            Capability.GPU | Capability.CANCEL | Capability.RECONCILE | Capability.CPU_AFFINITY
        )
        if self.memory_mechanism != "none":
            self.capabilities |= Capability.MEMORY_LIMIT
        self._watches: dict[str, _Watch] = {}
        self._ended: dict[str, WorkerExit] = {}
        self._cpu_load: Counter[int] = Counter()
        self.isolation: Isolation = isolation or isolation_for(
            self.root, python=self.python, sandbox=sandbox, worker_uids=worker_uids,
            read_only=read_only, protected=protected)
        self._uids = UidPool(self.isolation.uids) if self.isolation.uids else None
        self._zygote = (
            self._adopt_or_share_zygote()
            if warm and enabled_by_env()
            else None
        )

    def _adopt_or_share_zygote(self) -> Zygote:
        """The warm interpreter `cairn up` forked for this launcher, else the one this
        process's launchers share (many simulated sites in one process), made on first use."""
        env = zygote_env(self.python, str(self.root))
        inherited = inherited_socket()
        if inherited is not None:
            return Zygote(self.python, env, inherited=inherited)
        return shared_zygote(self.python, env)

    async def launch(self, spec: LaunchSpec) -> LaunchHandle:
        """Prepare the working directory and start the worker.

        Raises:
            InvalidInput: a bad entrypoint, or CPUs this launcher may not use.
            Conflict: this launch id was launched before (reattach instead).
            LaunchFailed: missing code or dataset, program not found, spawn failed, a
                dataset the sandbox does not mount.
            StudyRefused: this site cannot isolate workers and the study is not trusted.
        """
        self.isolation.admit(spec)
        cpus = pick_cpus(spec, self._cpu_load)
        uid, workdir = await asyncio.to_thread(
            prepare_isolated, self.isolation, self._uids, spec, self.root)
        limit = MemoryLimit(mechanism="none")
        try:
            # A host process sees the host's paths and GPUs; the launcher forwards its spans.
            env = worker_environment(spec, WorkerPlatform(
                workdir=str(workdir), data=str(data_dir(workdir)),
                secrets=str(secrets_dir(workdir)), gpu_ids=GpuIds.HOST,
                start=host_start_env(self.python, home=str(workdir)), cpus=cpus,
                spool=str(tracespool.spool_path(workdir)),
                # The launcher's own HOME is not the job's business.
                facts={"HOME": str(workdir)} if self.isolation.isolated else {}))
            argv = worker_argv(spec.entrypoint, env["PATH"], workdir)
            limit = await asyncio.to_thread(
                apply_memory_limit,
                f"{self._cgroup_prefix}-{dir_name(spec.launch_id)}",
                spec.memory_bytes,
                self.memory_mechanism,
            )
            pid, ticks = await start_worker(
                self.python, argv, env, workdir, cpus, limit, uid=uid,
                sandbox=self.isolation.sandbox, zygote=self._zygote,
                datasets=[(name, str(Path(m.source).resolve()), m.mode)
                          for name, m in spec.datasets.items()], gpus=spec.gpus)
        except BaseException:
            # Nothing ran: leave no directory behind, so the same launch id may be retried.
            await asyncio.to_thread(remove_cgroup, limit.cgroup)
            await asyncio.to_thread(shutil.rmtree, workdir, True)
            await asyncio.to_thread(self._release_uid, spec.launch_id)
            raise
        handle = LaunchHandle(
            launch_id=spec.launch_id,
            backend=self.name,
            native_id=str(pid),
            workdir=str(workdir),
            log_path=str(workdir / LOG_NAME),
            started_at=datetime.now(UTC),
            start_ticks=ticks,
            memory_limit=limit.mechanism,
            cgroup=limit.cgroup,
            cpus=cpus,
            timeout_s=spec.timeout_s,
        )
        # At once, before anything else awaits: a launcher killed from here on finds the
        # worker again by this note (`find`), not only by its launch record.
        _handles.note(self.root, handle)
        self._start_watch(handle)
        return handle

    async def find(self, launch_id: str) -> LaunchHandle | None:
        """The worker a launcher started for `launch_id` but never recorded (it died in
        between), from the note `launch` wrote the moment it spawned it; None when there is
        none (then it never started). Whether it still runs is `reattach`'s to tell."""
        return await asyncio.to_thread(_handles.read, self.root, launch_id)

    def _release_uid(self, launch_id: str) -> None:
        if self._uids is not None:
            self._uids.release(launch_id)  # blocking: reads /proc

    def health(self) -> dict[str, object]:
        """What the launcher's health reply says of this backend: its workers' isolation,
        and its warm interpreter (pid, workers it started, whether `cairn up` forked it)."""
        warm = self._zygote.health() if self._zygote is not None else None
        return {**self.isolation.health(), "warm": warm}

    async def wait(self, handle: LaunchHandle) -> WorkerExit:
        """Wait for the worker to end (bounded by its timeout) and say how it ended."""
        return await wait_watched(self, handle)

    async def cancel(self, handle: LaunchHandle, grace_s: float) -> None:
        """SIGTERM the worker's process group, SIGKILL it after `grace_s`; returns once gone."""
        watch = await find_watch(self, handle)
        if isinstance(watch, WorkerExit):
            return
        watch.cancelled = True
        self._stop(watch, grace_s)
        assert watch.task is not None
        await wait_stopped(watch.task, grace_s + KILL_WAIT_S + 1.0)

    async def reattach(self, handle: LaunchHandle) -> LaunchHandle | WorkerExit:
        """Find a worker again after a launcher restart.

        Returns the handle while it still runs (its pid alive with the recorded start time);
        else how it ended, from the exit record its wrapper left.
        """
        known = already_known(self, handle)
        if known is not None:
            return known
        if self._uids is not None:
            # Its folder's group is its uid while it runs: held until it ends, and its
            # leftovers die then.
            with contextlib.suppress(OSError):
                group = (await asyncio.to_thread(os.stat, handle.workdir)).st_gid
                self._uids.claim(handle.launch_id, group)
        watch = self._new_watch(handle)
        seen = _proc.poll(watch.pid, handle.start_ticks)
        if not seen.running:
            return await self._finish(watch, seen.status)
        self._start_watch(handle, watch)
        return handle

    async def logs(self, handle: LaunchHandle, *, follow: bool = False) -> AsyncIterator[bytes]:
        """The captured stdout and stderr; with `follow`, until the worker ends."""
        if follow and handle.launch_id not in self._watches and handle.launch_id not in self._ended:
            await self.reattach(handle)
        path = Path(handle.log_path)
        async for chunk in stream_log(
                lambda offset: asyncio.to_thread(read_chunk, path, offset),
                lambda: handle.launch_id in self._watches, follow=follow, poll_s=self.poll_s):
            yield chunk

    async def close(self) -> None:
        """Stop watching; the workers keep running, for a restarted launcher to reattach."""
        await stop_watching(self._watches)
        if self._zygote is not None:
            await release_zygote(self._zygote)

    # -- internals -----------------------------------------------------------------------

    def _new_watch(self, handle: LaunchHandle) -> _Watch:
        deadline = None
        if handle.timeout_s is not None:
            elapsed = (datetime.now(UTC) - handle.started_at).total_seconds()
            deadline = asyncio.get_running_loop().time() + handle.timeout_s - elapsed
        return _Watch(handle=handle, pid=int(handle.native_id), deadline=deadline)

    def _start_watch(self, handle: LaunchHandle, watch: _Watch | None = None) -> None:
        watch = watch or self._new_watch(handle)
        self._watches[handle.launch_id] = watch
        self._cpu_load.update(handle.cpus)
        watch.task = asyncio.create_task(self._run(watch), name=f"watch {handle.launch_id}")

    def _stop(self, watch: _Watch, grace_s: float) -> None:
        """SIGTERM now, SIGKILL at `grace_s` from now (or sooner if already planned)."""
        self._signal(watch, signal.SIGTERM)
        kill_at = asyncio.get_running_loop().time() + grace_s
        watch.kill_at = kill_at if watch.kill_at is None else min(watch.kill_at, kill_at)

    def _signal(self, watch: _Watch, signum: int) -> None:
        # Only while the pid is still our wrapper (alive or a zombie): then its process group
        # id cannot have been handed to anyone else.
        if _proc.is_ours(watch.pid, watch.handle.start_ticks):
            _proc.signal_group(watch.pid, signum)

    async def _run(self, watch: _Watch) -> WorkerExit:
        loop = asyncio.get_running_loop()
        with _proc.exit_notice(watch.pid, watch.handle.start_ticks, loop) as exited:
            watch.exited = exited
            return await self._watch(watch, loop)

    async def _watch(self, watch: _Watch, loop: asyncio.AbstractEventLoop) -> WorkerExit:
        while True:
            seen = _proc.poll(watch.pid, watch.handle.start_ticks)
            if not seen.running:
                return await self._finish(watch, seen.status)
            now = loop.time()
            if (
                watch.deadline is not None
                and now >= watch.deadline
                and not (watch.timed_out or watch.cancelled)
            ):
                watch.timed_out = True
                self._stop(watch, self.grace_s)
            if watch.kill_at is not None and now >= watch.kill_at:
                self._signal(watch, signal.SIGKILL)
                watch.killed = True
                watch.kill_at, watch.give_up_at = None, now + KILL_WAIT_S
            if watch.give_up_at is not None and now >= watch.give_up_at:
                return await self._finish(watch, None, stuck=True)
            if watch.exited is None:
                await asyncio.sleep(self.poll_s)
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_s):
                        await watch.exited.wait()

    async def _finish(
        self, watch: _Watch, status: int | None, *, stuck: bool = False
    ) -> WorkerExit:
        handle = watch.handle
        if status is not None:
            # We reaped the leader: whatever it left in its group dies with it, so nothing
            # holds the CPUs or GPUs the agent is about to give to someone else.
            _proc.signal_group(watch.pid, signal.SIGKILL)
        record, tail = await asyncio.to_thread(read_outcome, handle.workdir, handle.log_path)
        status_code = None if status is None else _proc.exit_code_of(status)
        if status_code is None and record is None and watch.killed:
            # Our SIGKILL took the wrapper too, and someone else reaped it (a warm start's
            # zygote, or the old launcher's parent): it died of that signal.
            status_code = 128 + signal.SIGKILL
        observed = Observed(
            record=record,
            status_code=status_code,
            cancelled=watch.cancelled,
            timed_out=watch.timed_out,
            timeout_s=handle.timeout_s,
            oom_kills=oom_kills(handle.cgroup),
            log_tail=tail,
            memory_limit=handle.memory_limit,
        )
        await asyncio.to_thread(remove_cgroup, handle.cgroup)
        await asyncio.to_thread(remove_secrets, secrets_dir(handle.workdir))
        await asyncio.to_thread(_handles.forget, self.root, handle.launch_id)
        if self._uids is not None:
            await asyncio.to_thread(take_back, handle.workdir)
            await asyncio.to_thread(self._release_uid, handle.launch_id)
        if observed.status_code == MISMATCH_EXIT or (record and record.code == MISMATCH_EXIT):
            mismatch = await asyncio.to_thread(read_allocation_mismatch, handle.workdir)
            observed = msgspec.structs.replace(observed, allocation_mismatch=mismatch)
        code, cause, message = classify(observed)
        if stuck:
            code, cause = None, "infrastructure"
            message = f"still running {KILL_WAIT_S:g} s after SIGKILL (stuck in the kernel?)"
        ended = WorkerExit(
            launch_id=handle.launch_id,
            exit_code=code,
            cause=cause,
            message=message,
            ended_at=datetime.now(UTC),
        )
        self._ended[handle.launch_id] = ended
        if self._watches.pop(handle.launch_id, None) is not None:
            self._cpu_load.subtract(handle.cpus)
        return ended

