"""The snapshotter: records what its site really is, on start, on a schedule and on request,
and reports drift from the snapshot before.

Snapshots are published as `site.snapshot` on `cairn.site.<site>.snapshot` (FEDERATION);
each one is compared with the previous one (read back from the stream on start) and the
changed readings, less volatile ones, go out as `site.drift`.

Options (`-O key=value`): `snapshot_interval_s` (default 3600), `snapshot_inline_max_bytes`
(default 256 KiB), `snapshot_readings` (a JSON file of `{path: reading}` merged into the
node's readings on every collection: facts no collector finds, and how tests simulate a
change), `node_name` (default: the host name).

Node-level facts: `snapshot_collect=local` collects on this machine (the default where the
node *is* the machine: process and docker backends); `snapshot_collect=jobs` (the default for
Slurm and Kubernetes sites) runs one collection job per node through the site's launcher and
merges the nodes' readings with the cluster-level facts of the scheduler's API, collected
here. `actor` names who submits those jobs (default: the seed's first project admin).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from cairn import api, subjects
from cairn.bus import UndecodableRecord, report_skipped
from cairn.errors import CairnError, InvalidInput, NotFound, Unavailable
from cairn.events import ReadingChange, SnapshotDrift, SnapshotRecorded, stamp
from cairn.runtime.service import Runtime, ServiceConfig
from cairn.snapshot import Reading, Snapshot, diff, flatten, make_snapshot
from cairn.snapshot.collectors import ClusterCollected
from cairn.snapshot.remote import INLINE_MAX_BYTES, latest_record, record, snapshot_of
from cairn.snapshotter.nodejobs import collect_nodes, expected_nodes
from cairn.spec.site import KubernetesCluster
from cairn.subjects import ApiAddress

log = logging.getLogger("cairn.snapshotter")

VOLATILE = ("Memory.info.available-bytes",)
"""Readings that move from one moment to the next: never drift."""


class SnapshotterService:
    name: ClassVar[str] = "snapshotter"

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.site: str = config.site
        self._child = ChildCollection()
        from cairn.spec.site import load_site_config

        if config.site_config:
            self.site = load_site_config(config.site_config).site
        options: dict[str, str] = dict(config.options or {})
        try:
            self.interval = float(options.get("snapshot_interval_s", 3600))
            self.inline_max = int(options.get("snapshot_inline_max_bytes", INLINE_MAX_BYTES))
            self.initial_delay = float(options.get("snapshot_initial_delay_s", 1.0))
            backend = "process"
            # A Kubernetes site's cluster facts come from its API, reached as site.yaml says.
            self.kubernetes: Any = None
            if config.site_config:
                site_cfg = load_site_config(config.site_config)
                backend = site_cfg.backend
                if backend == "kubernetes":
                    self.kubernetes = site_cfg.kubernetes or KubernetesCluster()
            self.mode = options.get("snapshot_collect") or (
                "jobs" if backend in ("slurm", "kubernetes") else "local")
            if self.mode not in ("local", "jobs"):
                raise ValueError(f"snapshot_collect must be local or jobs, not {self.mode!r}")
            self.actor = options.get("actor") or None
        except ValueError as exc:
            raise InvalidInput(f"snapshotter option: {exc}", field="option") from None
        extra = options.get("snapshot_readings")
        self.extra_file = Path(extra) if extra else None
        self.node_name = options.get("node_name") or None
        self.previous: Snapshot | None = None
        self.taken = 0
        self._lock = asyncio.Lock()
        self._ready = False
        self.rt: Runtime | None = None

    def ready(self) -> bool:
        return self._ready

    def health(self) -> dict[str, Any]:
        return {"snapshots": self.taken,
                "digest": self.previous.digest if self.previous else None}

    async def start(self, rt: Runtime) -> None:
        self.rt = rt
        rt.site = self.site
        self.previous = await self._previous()
        await rt.serve_api(subjects.site_snapshot_request(self.site), self._on_request)
        # The first snapshot is taken in the background: a slow collector must not hold up
        # the agent and launcher that share this process.
        rt.spawn(self._schedule(), "snapshotter-schedule")
        self._ready = True

    async def stop(self) -> None:
        self._ready = False
        self._child.stop()  # a collection under way would hold the exit for seconds

    async def _previous(self) -> Snapshot | None:
        assert self.rt is not None
        try:
            last = await latest_record(self.rt.bus, self.site)
            return None if last is None else await snapshot_of(self.rt.bus, last)
        except UndecodableRecord as exc:
            # Someone published garbage on our snapshot subject: report it, start afresh.
            await report_skipped(self.rt.bus, exc, site=self.site, service="snapshotter")
            return None
        except CairnError as exc:
            log.warning("previous snapshot unreadable, drift starts afresh: %s", exc)
            return None

    async def _schedule(self) -> None:
        # A moment's grace: the first snapshot's collectors (docker, slurm probes) would
        # otherwise compete for the CPU with every parent that is starting up beside it.
        await asyncio.sleep(self.initial_delay)
        reason = "start"
        while True:
            try:
                await self.take(reason)
            except CairnError as exc:
                log.warning("snapshot failed: %s", exc)
            reason = "schedule"
            await asyncio.sleep(max(1.0, self.interval))

    async def _on_request(self, envelope: api.Envelope, address: ApiAddress) -> api.Result:
        match envelope.request:
            case api.SnapshotNow():
                _, event = await self.take("request")
                return api.SnapshotTaken(recorded=event)
            case other:
                raise NotFound(f"the snapshotter does not serve {api.verb_of(other)!r}")

    async def take(self, reason: str) -> tuple[Snapshot, SnapshotRecorded]:
        """Collect, publish, and publish drift against the previous snapshot."""
        assert self.rt is not None
        bus = self.rt.bus
        async with self._lock:  # one at a time: drift is always against the one before
            if self.mode == "jobs":
                snap = await self._collect_with_jobs()
            else:
                snap = await asyncio.to_thread(self._collect)
            event = await record(bus, snap, source=f"snapshotter@{self.site}", reason=reason,
                                 inline_max=self.inline_max)
            await bus.publish(event)
            if self.previous is not None:
                changes = diff(self.previous, snap, ignore=VOLATILE)
                if changes:
                    await bus.publish(SnapshotDrift(
                        **stamp(), source=f"snapshotter@{self.site}", cause=event.id,
                        site=self.site, previous=self.previous.digest, current=snap.digest,
                        changes=[ReadingChange(path=c.path, node=c.node, before=c.before,
                                               after=c.after) for c in changes]))
            self.previous = snap
            self.taken += 1
            return snap, event

    def _collect(self) -> Snapshot:
        from cairn.snapshot.collect import collect_local

        cluster = self._cluster_collectors()
        snap = (self._child.collect(self.site, self.node_name) if cluster is None else None) \
            or collect_local(self.site, node_name=self.node_name, cluster=cluster)
        extra = self._extra_readings()
        if not extra:
            return snap
        return make_snapshot(
            site=snap.site, taken_at=snap.taken_at, cluster=flatten(snap.cluster),
            nodes={n.node: {**flatten(n), **extra} for n in snap.nodes},
            node_errors={n.node: list(n.errors) for n in snap.nodes}, errors=list(snap.errors))

    async def _collect_with_jobs(self) -> Snapshot:
        """Cluster facts from the scheduler's API here, node facts from collection jobs."""
        from cairn.snapshot.collect import collect_local

        assert self.rt is not None
        here = await asyncio.to_thread(collect_local, self.site, collectors={},
                                       cluster=self._cluster_collectors())
        scheduler_nodes = [n.node for n in here.nodes if flatten(n)]
        nodes, errors = await collect_nodes(self.rt.bus, self.site,
                                            expected_nodes(scheduler_nodes), self.actor)
        extra = self._extra_readings()
        readings = {n.node: {**flatten(n), **extra} for n in nodes}
        for n in here.nodes:  # what the scheduler says of each node, beside what it says itself
            if flatten(n):
                readings.setdefault(n.node, {}).update(flatten(n))
        return make_snapshot(
            site=self.site, taken_at=here.taken_at, cluster=flatten(here.cluster),
            nodes=readings, node_errors={n.node: list(n.errors) for n in nodes},
            errors=[*here.errors, *errors])

    def _cluster_collectors(self) -> dict[str, Callable[[], ClusterCollected]] | None:
        """The Kubernetes collector with this site's cluster; None: the default ones."""
        if self.kubernetes is None:
            return None
        from cairn.snapshot.collectors import k8s

        return {"kubernetes": functools.partial(k8s.collect, cluster=self.kubernetes)}

    def _extra_readings(self) -> dict[str, Reading]:
        if self.extra_file is None:
            return {}
        try:
            data = json.loads(self.extra_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInput(f"cannot read: {exc}", file=str(self.extra_file)) from None
        if not isinstance(data, dict):
            raise InvalidInput("must be a JSON object {path: reading}", file=str(self.extra_file))
        return {str(k): v for k, v in data.items()}


class ChildCollection:
    """The default collectors' snapshot, taken in a child process (`cairn.snapshot._child`)
    so that what they import and allocate leaves with it."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopped = False

    def collect(self, site: str, node_name: str | None) -> Snapshot | None:
        """The snapshot; None (and a warning) when the child failed, for the caller to
        collect in this process instead.

        Raises:
            Unavailable: the service is stopping (the child was ended for it).
        """
        from cairn.snapshot.collect import DEADLINE
        from cairn.snapshot.model import decode

        if self._stopped:
            raise Unavailable("the snapshotter is stopping")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "cairn.snapshot._child", site, node_name or ""],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = self._proc.communicate(timeout=DEADLINE + 30.0)
        except (OSError, subprocess.TimeoutExpired) as exc:
            if self._proc is not None:
                self._proc.kill()
                self._proc.communicate()
            log.warning("snapshot child failed (%s); collecting in this process", exc)
            return None
        code, self._proc = self._proc.returncode, None
        if self._stopped:
            raise Unavailable("the snapshotter is stopping")
        if code != 0:
            log.warning("snapshot child exited %d (%s); collecting in this process", code,
                        err.decode(errors="replace").strip()[-300:])
            return None
        try:
            return decode(out, source="the snapshot child")
        except CairnError as exc:
            log.warning("snapshot child: %s; collecting in this process", exc)
            return None

    def stop(self) -> None:
        """End a collection under way (its thread returns at once); no more after this."""
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
