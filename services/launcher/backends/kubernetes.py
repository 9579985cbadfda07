"""The `kubernetes` backend: each worker is one pod (`restartPolicy: Never`) in its study's
namespace, through the official `kubernetes` client (docs/sites/kubernetes.md).

The pod (`kubernetes_pod.build_pod`) carries its launch as a label (`cairn.launch`, a hash)
and an annotation (`cairn.launch-id`): a restarted launcher finds it by both. One watch per
namespace wakes each pod's own loop, which also reads its pod every `poll_s`: a watch that
drops events costs latency, never an exit. A pod pending past its `pending_timeout` is
deleted and ends `unschedulable` with the reason `kubernetes_status.pending_reason` found;
cancel and timeout delete the pod. An ended pod's log goes to `worker.log` and its end to
`.cairn/pod.json`, then the pod is deleted: a launcher that restarts later still knows.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from cairn.errors import CairnError, Conflict, NotFound
from cairn.launcher.backends._watching import (
    already_known,
    find_watch,
    stop_watching,
    stream_log,
    wait_changed,
    wait_stopped,
    wait_watched,
)
from cairn.launcher.backends._workdir import (
    LOG_NAME,
    dir_name,
    prepare_workdir,
    read_allocation_mismatch,
    read_chunk,
    split_entrypoint,
)
from cairn.launcher.backends.base import Capability, LaunchHandle, LaunchSpec, WorkerExit
from cairn.launcher.backends.errors import LaunchFailed
from cairn.launcher.backends.kubernetes_api import RBAC_RULES, PodApi
from cairn.launcher.backends.kubernetes_files import (
    read_record,
    read_template,
    refuse_unrunnable,
    settings_of,
    write_record,
)
from cairn.launcher.backends.kubernetes_pod import (
    ANNOTATION_LAUNCH,
    LABEL_LAUNCH,
    MANAGED_BY,
    build_pod,
    launch_label,
    owned_by,
    pod_location,
    pod_name,
    values_secret,
)
from cairn.launcher.backends.kubernetes_status import (
    Pending,
    events_of,
    has_ended,
    is_running,
    outcome,
    pending_reason,
    phase,
    stopped_by_us,
)
from cairn.launcher.backends.kubernetes_watch import NamespaceWatch
from cairn.spec.site import KubernetesCluster
from cairn.worker.allocation import MISMATCH_EXIT

__all__ = ["RBAC_RULES", "KubernetesBackend"]

ANNOTATION_PENDING = "cairn.pending-timeout-s"
DEFAULT_PENDING_S = 600.0
log = logging.getLogger("cairn.launcher.kubernetes")


@dataclass
class _Watch:
    handle: LaunchHandle
    namespace: str
    name: str
    pending_timeout_s: float
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    latest: dict[str, Any] | None = None
    cancelled: bool = False
    timed_out: bool = False
    task: asyncio.Task[WorkerExit] | None = None


class KubernetesBackend:
    """Workers as pods.

    Args:
        workdir: The site workdir; each worker's local folder (log, end record, and with a
            `workdir_claim` the folder the pod sees) is `<workdir>/workers/<launch id>`.
        cluster: site.yaml's `kubernetes:` section (the API, default namespace, claim).
        grace_s: Time between SIGTERM and SIGKILL when a timeout stops a worker.
        poll_s: How often a pod's loop reads its pod even when the watch is quiet.
        request_timeout_s: The bound on every API call.
        watch_s: How long one watch request lasts before it is made again.
        api_lost_s: How long the API may not answer before a worker is reported lost.
    """

    name = "kubernetes"

    def __init__(self, workdir: str | Path, *, cluster: KubernetesCluster | None = None,
                 grace_s: float = 10.0, poll_s: float = 2.0, request_timeout_s: float = 15.0,
                 watch_s: float = 30.0, api_lost_s: float = 600.0) -> None:
        self.root = Path(workdir)
        self.cluster = cluster or KubernetesCluster()
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.request_timeout_s = request_timeout_s
        self.watch_s = watch_s
        self.api_lost_s = api_lost_s
        self.capabilities = (Capability.CONTAINERS | Capability.GPU | Capability.CANCEL
                             | Capability.RECONCILE | Capability.MEMORY_LIMIT)
        self._pods = PodApi(self.cluster, timeout_s=request_timeout_s)
        self._watches: dict[str, _Watch] = {}
        self._ended: dict[str, WorkerExit] = {}
        self._namespace_watches: dict[str, NamespaceWatch] = {}

    # -- the Backend protocol -------------------------------------------------------------

    async def launch(self, spec: LaunchSpec) -> LaunchHandle:
        """Create the worker's pod.

        Raises:
            InvalidInput: no image, a bad entrypoint, setting, dataset or secret source.
            Conflict: this launch's pod exists (reattach instead).
            LaunchFailed: the pod template is unreadable; the API refused the pod.
        """
        await asyncio.to_thread(refuse_unrunnable, spec, self.cluster)
        argv = split_entrypoint(spec.entrypoint)
        settings = settings_of(spec.platform)
        await self._pods.connect()
        namespace = settings.namespace or self.cluster.namespace
        template = await asyncio.to_thread(read_template, settings.pod_template)
        pod = build_pod(spec, argv, settings=settings, cluster=self.cluster,
                        namespace=namespace, work_subpath=f"workers/{dir_name(spec.launch_id)}",
                        template=template, grace_s=self.grace_s)
        pending_s = float(settings.pending_timeout)
        pod["metadata"]["annotations"][ANNOTATION_PENDING] = f"{pending_s:g}"
        local = msgspec.structs.replace(spec, datasets={})  # they are claims, not paths here
        workdir = await asyncio.to_thread(prepare_workdir, local, self.root)
        try:
            created = await self._pods.create(namespace, pod)
            if spec.secret_env:
                # After the pod, to be owned by it (its uid); the kubelet waits for it.
                uid = (created.get("metadata") or {}).get("uid")
                await self._pods.create_secret(namespace, values_secret(spec, namespace, uid),
                                               for_pod=pod_name(spec))
        except BaseException as exc:
            await asyncio.to_thread(shutil.rmtree, workdir, True)
            where = f"pod {namespace}/{pod['metadata']['name']}"
            if isinstance(exc, Conflict):
                raise Conflict(f"{where} exists: launch {spec.launch_id} was started before",
                               field="launch_id") from None
            if isinstance(exc, CairnError):
                raise LaunchFailed(f"the cluster refused {where}: {exc}") from None
            raise
        handle = LaunchHandle(
            launch_id=spec.launch_id, backend=self.name,
            native_id=f"{namespace}/{pod['metadata']['name']}", workdir=str(workdir),
            log_path=str(workdir / LOG_NAME), started_at=datetime.now(UTC),
            memory_limit="kubernetes" if spec.memory_bytes else "none",
            timeout_s=spec.timeout_s)
        self._start_watch(handle, pending_s)
        return handle

    async def wait(self, handle: LaunchHandle) -> WorkerExit:
        """Wait for the pod to end (bounded by its timeouts) and say how it ended."""
        return await wait_watched(self, handle)

    async def started(self, handle: LaunchHandle) -> WorkerExit | None:
        """Wait until the worker's container runs (None), or how it ended before it did."""
        watch = await find_watch(self, handle)
        while isinstance(watch, _Watch):
            if watch.latest is not None and is_running(watch.latest):
                return None
            assert watch.task is not None
            done, _ = await asyncio.wait({watch.task}, timeout=self.poll_s)
            if done:
                ended: WorkerExit = watch.task.result()
                return ended
        return watch if isinstance(watch, WorkerExit) else None

    async def cancel(self, handle: LaunchHandle, grace_s: float) -> None:
        """Delete the pod (SIGTERM, SIGKILL after `grace_s`); returns once it is gone."""
        watch = await find_watch(self, handle)
        if isinstance(watch, WorkerExit):
            return
        watch.cancelled = True
        await self._stop(watch, grace_s)
        assert watch.task is not None
        await wait_stopped(watch.task, grace_s + 30.0)

    async def reattach(self, handle: LaunchHandle) -> LaunchHandle | WorkerExit:
        """Find a pod again after a launcher restart, by its launch label: the handle while
        it runs, else how it ended (from the pod, or from the end record it left)."""
        known = already_known(self, handle)
        if known is not None:
            return known
        namespace, _ = pod_location(handle)
        await self._pods.connect()
        try:
            found = await self._pods.find(namespace,
                                          f"{LABEL_LAUNCH}={launch_label(handle.launch_id)}")
        except CairnError as exc:
            # The API is not answering: watch it anyway; the watch decides once it answers
            # (or reports the worker lost), rather than this launcher failing to start.
            log.warning("cannot look for %s's pod yet: %s", handle.launch_id, exc)
            self._start_watch(handle, DEFAULT_PENDING_S)
            return handle
        pods = [p for p in found if owned_by(p, handle.launch_id)]
        if not pods:
            return await self._finish(self._new_watch(handle, 0.0), None)
        pod = pods[0]
        annotations = pod["metadata"].get("annotations") or {}
        pending_s = float(annotations.get(ANNOTATION_PENDING) or 0) or DEFAULT_PENDING_S
        moved = msgspec.structs.replace(handle, native_id=f"{namespace}/{pod['metadata']['name']}")
        if has_ended(pod):
            return await self._finish(self._new_watch(moved, pending_s), pod)
        self._start_watch(moved, pending_s, latest=pod)
        return moved

    async def find(self, launch_id: str) -> LaunchHandle | None:
        """The pod a launcher created for `launch_id` but never recorded (it died in
        between), found by its launch label in the site's namespace (a study that names its
        own namespace in study_runtime.yaml is not searched); None when there is none.

        Raises:
            CairnError: the API did not answer.
        """
        namespace = self.cluster.namespace
        await self._pods.connect()
        found = await self._pods.find(namespace, f"{LABEL_LAUNCH}={launch_label(launch_id)}")
        pods = [p for p in found if owned_by(p, launch_id)]
        if not pods:
            return None
        workdir = self.root / "workers" / dir_name(launch_id)
        return LaunchHandle(launch_id=launch_id, backend=self.name,
                            native_id=f"{namespace}/{pods[0]['metadata']['name']}",
                            workdir=str(workdir), log_path=str(workdir / LOG_NAME),
                            started_at=datetime.now(UTC))

    async def logs(self, handle: LaunchHandle, *, follow: bool = False) -> AsyncIterator[bytes]:
        """Its output: from the pod log API while the pod lives, from `worker.log` after."""
        def read(offset: int) -> Awaitable[bytes]:
            if handle.launch_id in self._watches:
                return self._pod_log(handle, offset)
            return asyncio.to_thread(read_chunk, Path(handle.log_path), offset)

        async for chunk in stream_log(read, lambda: handle.launch_id in self._watches,
                                      follow=follow, poll_s=self.poll_s):
            yield chunk

    async def close(self) -> None:
        """Stop watching; the pods keep running, for a restarted launcher to find."""
        await stop_watching(self._watches)
        for namespace_watch in self._namespace_watches.values():
            namespace_watch.stop()
        self._namespace_watches.clear()
        await self._pods.close()

    # -- watching -------------------------------------------------------------------------

    def _new_watch(self, handle: LaunchHandle, pending_s: float) -> _Watch:
        namespace, name = pod_location(handle)
        return _Watch(handle=handle, namespace=namespace, name=name, pending_timeout_s=pending_s)

    def _start_watch(self, handle: LaunchHandle, pending_s: float,
                     latest: dict[str, Any] | None = None) -> None:
        watch = self._new_watch(handle, pending_s)
        watch.latest = latest
        self._watches[handle.launch_id] = watch
        if watch.namespace not in self._namespace_watches:
            self._namespace_watches[watch.namespace] = self._pods.watch(
                watch.namespace, self._on_pod_event,
                selector=",".join(f"{k}={v}" for k, v in MANAGED_BY.items()),
                watch_s=self.watch_s)
        watch.task = asyncio.create_task(self._watch(watch), name=f"watch {handle.launch_id}")

    def _on_pod_event(self, namespace: str, pod: dict[str, Any], deleted: bool) -> None:
        """From the namespace's watch (on the event loop): wake the pod's loop."""
        launch_id = str(((pod.get("metadata") or {}).get("annotations") or {}).get(
            ANNOTATION_LAUNCH, ""))
        watch = self._watches.get(launch_id)
        if watch is None or watch.namespace != namespace or not owned_by(pod, launch_id):
            return
        watch.latest = None if deleted else pod
        watch.changed.set()

    async def _watch(self, watch: _Watch) -> WorkerExit:
        handle = watch.handle
        loop = asyncio.get_running_loop()
        unanswered_since: float | None = None
        while True:
            # Cleared before the read, not after: a watch event that comes while the read is
            # on its way makes the loop read again, instead of being lost until the next poll.
            watch.changed.clear()
            try:
                pod = await self._read(watch)
            except CairnError as exc:
                # No decision on what the API cannot tell: a pod that looks pending only
                # because the API is down is not unschedulable. Bounded: long enough gone,
                # the worker is lost (the kubelet's deadline still ends the pod).
                unanswered_since = unanswered_since or loop.time()
                if loop.time() - unanswered_since >= self.api_lost_s:
                    return await self._record(watch, WorkerExit(
                        launch_id=handle.launch_id, exit_code=None, cause="infrastructure",
                        ended_at=datetime.now(UTC), message=f"the Kubernetes API has not "
                        f"answered for {self.api_lost_s:g} s: {exc}"))
                await asyncio.sleep(self.poll_s)
                continue
            unanswered_since = None
            watch.latest = pod
            if pod is None or has_ended(pod):
                return await self._finish(watch, pod)
            age = (datetime.now(UTC) - handle.started_at).total_seconds()
            # Pending only: a pod whose node stopped reporting (phase Unknown) ran, and is
            # not unschedulable; the node controller fails or removes it in its own time.
            if phase(pod) == "Pending" and age >= watch.pending_timeout_s and not watch.cancelled:
                return await self._unschedulable(watch, pod, age)
            if (handle.timeout_s is not None and age >= handle.timeout_s
                    and not (watch.timed_out or watch.cancelled)):
                watch.timed_out = True
                await self._stop(watch, self.grace_s)
            await wait_changed(watch.changed, self.poll_s)

    async def _read(self, watch: _Watch) -> dict[str, Any] | None:
        """The pod now; None once it is gone (or replaced by one that is not this launch's).

        Raises:
            CairnError: the API did not answer (or refused).
        """
        try:
            pod = await self._pods.read(watch.namespace, watch.name)
        except NotFound:
            return None
        return pod if owned_by(pod, watch.handle.launch_id) else None

    async def _unschedulable(self, watch: _Watch, pod: dict[str, Any], age: float
                             ) -> WorkerExit:
        events = events_of(pod, await self._pods.events(watch.namespace, watch.name))
        reason = pending_reason(pod, events) or Pending("pending", "the cluster gave no reason")
        await self._pods.delete(watch.namespace, watch.name, 0)
        ended = WorkerExit(launch_id=watch.handle.launch_id, exit_code=None,
                           cause="unschedulable", ended_at=datetime.now(UTC),
                           message=f"pending for {age:.0f} s, past its pending_timeout of "
                                   f"{watch.pending_timeout_s:g} s: {reason}")
        return await self._record(watch, ended)

    async def _stop(self, watch: _Watch, grace_s: float) -> None:
        # The log goes with the pod: keep what it has before asking it to stop.
        await self._save_log(watch)
        await self._pods.delete(watch.namespace, watch.name, grace_s)

    async def _finish(self, watch: _Watch, pod: dict[str, Any] | None) -> WorkerExit:
        handle = watch.handle
        now = datetime.now(UTC)
        if pod is not None:
            await self._save_log(watch)
            code, cause, message = outcome(pod)
            if code == MISMATCH_EXIT:
                # The worker's report is in its folder, which the launcher sees through the
                # site's workdir_claim (without one, exit 78 stays a crash).
                found = await asyncio.to_thread(read_allocation_mismatch, handle.workdir)
                if found is not None:
                    cause, message = "allocation-mismatch", f"ended before its code ran: {found}"
        else:
            kept = await asyncio.to_thread(read_record, handle.workdir)
            if kept is not None and not (watch.cancelled or watch.timed_out):
                self._forget(handle)
                self._ended[handle.launch_id] = kept
                return kept
            code, cause = None, "infrastructure"
            message = "its pod is gone: deleted by someone else, or while the launcher was down"
        cause, message = stopped_by_us(code, cause, message, cancelled=watch.cancelled,
                                       timed_out=watch.timed_out, timeout_s=handle.timeout_s)
        ended = WorkerExit(launch_id=handle.launch_id, exit_code=code, cause=cause,
                           message=message, ended_at=now)
        ended = await self._record(watch, ended)
        if pod is not None:
            await self._pods.delete(watch.namespace, watch.name, 0)
        return ended

    async def _record(self, watch: _Watch, ended: WorkerExit) -> WorkerExit:
        # Written before the pod is deleted: a launcher that dies in between still knows.
        await asyncio.to_thread(write_record, watch.handle.workdir, ended)
        self._ended[watch.handle.launch_id] = ended
        self._forget(watch.handle)
        return ended

    def _forget(self, handle: LaunchHandle) -> None:
        watch = self._watches.pop(handle.launch_id, None)
        if watch is None:
            return
        namespace = watch.namespace
        if not any(w.namespace == namespace for w in self._watches.values()):
            stopped = self._namespace_watches.pop(namespace, None)
            if stopped is not None:
                stopped.stop()

    async def _pod_log(self, handle: LaunchHandle, offset: int) -> bytes:
        data = await self._pods.log(*pod_location(handle))
        return data[offset:]

    async def _save_log(self, watch: _Watch) -> None:
        data = await self._pod_log(watch.handle, 0)
        if data:
            await asyncio.to_thread(Path(watch.handle.log_path).write_bytes, data)
