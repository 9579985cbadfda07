"""The authority: the federation's auth callout, on the hub, in its own process.

It starts before every other Cairn process (they cannot connect without it) and reaches the
server with three static nkey users named in nats.conf: `auth` answers
`$SYS.REQ.USER.AUTH`, `sys` lists and disconnects connections (`CONNZ`, `KICK`), and
`reader` follows membership and job ends on the study streams. Whenever membership changes,
a revocation is written or a job or worker ends, every admitted connection is checked again;
one whose permissions changed is disconnected, reconnects and gets the new ones, and one that
lost its standing is refused. A connection whose user JWT nears its expiry is disconnected
too, so it renews its rights while the authority is there to decide them.

What it acts on is checked like every service's input (`cairn.subjects.misplaced`):
membership comes only from the coordinator's admin subjects, job ends only from the
coordinator's job subjects, and a worker's end only from its own site's launcher, for that
worker. Connections it admitted are kept in KV (`connections.py`) and re-learned from the
servers on start, so a restart forgets none.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import msgspec

from cairn import subjects
from cairn.authority.connections import Records, live_connections
from cairn.authority.kitfiles import KitFiles, seed
from cairn.authority.streams import Streams
from cairn.bus import Bus, Lease, decode_event, replay
from cairn.bus._lease import DEFAULT_TTL_S
from cairn.events import (
    STUDY_DECODER,
    JobAborted,
    JobCompleted,
    JobFailed,
    StudyAdminAdded,
    StudyAdminRemoved,
    StudyCreated,
    StudySiteAdded,
    StudySiteRemoved,
    WorkerExited,
)
from cairn.runtime import phases
from cairn.runtime.context import tls_context
from cairn.spec.federation import Federation
from cairn.spec.runtime import VALIDATION_STUDY
from cairn.state import study as study_state
from cairn.subjects.table import SYS_AUTH_CALLOUT, sys_disconnects, sys_kick
from cairn.trust.authority import SESSION_S, Authorizer, Connection
from cairn.trust.credentials import Kind
from cairn.trust.natsconfig import APP_ACCOUNT
from cairn.trust.nkeyjwt import public_key, read_roots_file
from cairn.trust.permissions import Membership

log = logging.getLogger("cairn.authority")

AUTH_SUBJECT = SYS_AUTH_CALLOUT
DISCONNECT_EVENTS = sys_disconnects(APP_ACCOUNT)
REVOCATION_POLL_S = 0.5
END_VERBS = ("completed", "failed", "aborted")
SWEEP_DELAY_S = 0.3
RENEW_FRACTION = 0.2
"""A connection is asked to renew once less than this part of its session is left."""
DECISIONS_AT_ONCE = 32
"""Auth callouts answered concurrently: a site's first admission waits on JetStream (its
streams) and every admission on a KV write; one at a time, a thousand sites starting
together were admitted a few a second and timed out at the server."""


class AuthorityService:
    """Answers auth callouts and keeps admitted connections within their rights."""

    def __init__(self, kit: Path, nats_url: str, federation: Federation | None,
                 session_s: float = SESSION_S, servers: int | None = None,
                 lease_ttl_s: float = DEFAULT_TTL_S) -> None:
        self.kit = kit
        self.servers = servers
        """How many nats-servers there are, when known for certain (see `live_connections`)."""
        self.nats_url = nats_url
        self.federation = federation
        # Every file of the kit read bounded (`cairn.files`): one message, never a hang.
        roots = read_roots_file(kit / "roots.txt")
        self.authorizer = Authorizer(roots=roots, session_s=session_s,
                                     issuer_seed=seed(kit / "account.nk"))
        self.reader_key = public_key(seed(kit / "reader.nk"))
        self.kit_files = KitFiles(kit, self.authorizer)
        self.records: Records | None = None
        self.studies: dict[str, study_state.StudyState] = {}
        self.connections: dict[tuple[str, int], Connection] = {}
        self._deciding = asyncio.Semaphore(DECISIONS_AT_ONCE)
        self._answering: set[asyncio.Task[None]] = set()
        self._reader: Bus | None = None
        self.streams: Streams | None = None
        self._sys: Bus | None = None
        self._auth: Bus | None = None
        self._sweep = asyncio.Event()
        self.lease_ttl_s = lease_ttl_s
        self.lease: Lease | None = None
        self.lost_lease = False
        """Set when this instance lost its lease to another: it stops, to be started again
        as a standby."""

    async def run(self, stop: asyncio.Event) -> None:
        phases.mark("authority.start")
        self._reader = await self._connect("reader")
        self.streams = Streams(self._reader)
        # Once per federation: a standby waits here until the active one's lease is gone,
        # then rebuilds everything below from the bus and the kit, as a restart does.
        self.lease = Lease(self._reader, "authority", ttl_s=self.lease_ttl_s)
        if not await self.lease.try_acquire():
            log.info("authority: standby, behind the active authority's lease")
            if not await self.lease.acquire(stop):
                await self._reader.close()
                return
            log.info("authority: taking over (term %d)", self.lease.term)
        # Kept from now on: what follows may take longer than the lease lasts.
        keeper = asyncio.create_task(self._keep_lease(stop))
        self._sys = await self._connect("sys")
        phases.mark("authority.connected")
        self.kit_files.revocations()
        self._seed_membership()
        await self.streams.federation(self.studies)
        phases.mark("authority.streams")
        await self._follow()
        phases.mark("authority.followed")
        await self._reader.subscribe_core(subjects.site_studies_all(), self._on_studies_request)
        await self._sys.subscribe_core(DISCONNECT_EVENTS, self._on_disconnect)
        self.records = Records(self._reader)
        await self.records.open()
        await self._relearn()
        phases.mark("authority.relearned")
        self._auth = await self._connect("auth")
        await self._auth.nc.subscribe(AUTH_SUBJECT, cb=self._on_auth_message)
        await self._auth.nc.flush(timeout=5)
        (self.kit / "ready").write_text(f"{time.time()}\n")
        log.info("authority ready: %d studies, roots %s", len(self.studies),
                 ", ".join(sorted(self.authorizer.roots)))
        tasks = [keeper, asyncio.create_task(self.streams.sites(
                     site.name for site in (self.federation.sites if self.federation else ()))),
                 asyncio.create_task(self._poll_revocations(stop)),
                 asyncio.create_task(self._sweeper(stop)),
                 asyncio.create_task(self._renewals(stop))]
        try:
            await stop.wait()
        finally:
            for task in (*tasks, *self._answering):
                task.cancel()
            await asyncio.gather(*tasks, *self._answering, return_exceptions=True)
            if not self.lost_lease:  # the ready file is the active authority's
                (self.kit / "ready").unlink(missing_ok=True)
                if self.lease is not None:
                    await self.lease.release()
            for bus in (self._auth, self._sys, self._reader):
                if bus is not None:
                    await bus.close()

    async def _connect(self, user: str) -> Bus:
        return await Bus.connect(self.nats_url, name=f"cairn-authority-{user}",
                                 tls=tls_context(str(self.kit / "ca.pem"), None, None),
                                 nkey_seed=str(self.kit / f"{user}.nk"), retry_for=float("inf"))

    # -- membership ---------------------------------------------------------------------

    def _seed_membership(self) -> None:
        if self.federation is None:
            return
        fed = self.federation
        studies = {name: (list(m.sites), list(m.admins)) for name, m in fed.studies.items()}
        # As the coordinator seeds it: the check-job study has every site, the project admins.
        studies.setdefault(VALIDATION_STUDY, ([s.name for s in fed.sites],
                                              [a.name for a in fed.admins
                                               if a.role == "project_admin"]))
        for name, (sites, names) in studies.items():
            admins = [{"name": a, "org": (fed.admin(a) or _NoOrg).org} for a in names]
            created = msgspec.convert({"type": "study.created", "id": f"seed-{name}",
                                       "at": "1970-01-01T00:00:00Z", "study": name,
                                       "source": "authority@hub", "name": name,
                                       "sites": sites, "admins": admins},
                                      StudyCreated)
            self.studies[name] = study_state.apply(None, created)  # type: ignore[assignment]
        self._publish_membership()

    def _publish_membership(self) -> None:
        self.authorizer.membership = {
            name: Membership(sites=frozenset(s.sites), admins=frozenset(s.admins))
            for name, s in self.studies.items()}

    def _apply(self, event: object) -> bool:
        """Fold one study event; True when it changed who may do what."""
        match event:
            case StudyCreated() | StudySiteAdded() | StudySiteRemoved() | StudyAdminAdded() | \
                    StudyAdminRemoved() if event.study:
                before = self.studies.get(event.study)
                after = study_state.apply(before, event)
                if after is None or after == before:
                    return False
                self.studies[event.study] = after
                self._publish_membership()
                return before is None or before.sites != after.sites or \
                    set(before.admins) != set(after.admins)
            case JobCompleted() | JobFailed() | JobAborted() if event.study:
                self.authorizer.ended_jobs.add((event.study, event.job))
                return True
            case WorkerExited():
                self.authorizer.revoked_names.add(event.launch_id)
                return True
        return False

    async def _follow(self) -> None:
        """Subscribe to membership changes and job ends, then catch up on what came before."""
        assert self._reader is not None
        live = [subjects.study_admin_all(), f"{subjects.ROOT}.study.*.job.*.site.*.exited",
                *(f"{subjects.ROOT}.study.*.job.*.{verb}" for verb in END_VERBS)]
        for subject in live:
            await self._reader.subscribe_core(subject, self._on_study_event)
        for stream in await self._reader.stream_names(subjects.STUDY_STREAM_PREFIX):
            study = stream.removeprefix(subjects.STUDY_STREAM_PREFIX)
            filters = [subjects.study_admin_all(study),
                       *(f"{subjects.ROOT}.study.{study}.job.*.{verb}" for verb in END_VERBS),
                       f"{subjects.ROOT}.study.{study}.job.*.site.*.exited"]
            async for item in replay(self._reader, stream, STUDY_DECODER, filters=filters):
                if item.event is not None:
                    self._apply(item.event)

    async def _on_study_event(self, msg: Any) -> None:
        # Checked against its subject (the coordinator's consumer dead-letters a forgery;
        # here it is simply never applied).
        event = decode_event(STUDY_DECODER, msg)
        if event is None:
            return
        if self._apply(event):
            if isinstance(event, StudyCreated) and event.study:
                assert self.streams is not None
                await self.streams.study(event.study)
            self._sweep.set()

    async def _on_studies_request(self, msg: Any) -> None:
        """A site asks which studies it is in: only a site may publish on its own subject,
        so the subject's site token is the asker."""
        site = str(msg.subject).split(".")[-2]
        studies = sorted(name for name, s in self.studies.items() if site in s.sites)
        # Only those the site's connections may already read: a study it just joined is
        # named once its connection has been renewed with the new permissions.
        for conn in self.connections.values():
            if conn.identity.kind in (Kind.SITE, Kind.HUB) and conn.identity.site == site:
                studies = [s for s in studies if s in conn.studies]
        if site in self.authorizer.revoked_names:
            studies = []
        if msg.reply:
            await msg.respond(json.dumps({"ok": True, "studies": studies}).encode())

    # -- the callout ----------------------------------------------------------------------

    async def _keep_lease(self, stop: asyncio.Event) -> None:
        assert self.lease is not None
        await self.lease.keep()
        if not stop.is_set():
            self.lost_lease = True
            stop.set()

    async def _on_auth_message(self, msg: Any) -> None:
        """Answer each callout in its own task, up to `DECISIONS_AT_ONCE` at a time (beyond
        that the subscription waits): one admission's JetStream and KV round trips never
        hold up the next."""
        await self._deciding.acquire()
        task = asyncio.create_task(self._on_auth_request(msg), name="auth callout")
        self._answering.add(task)
        task.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Task[None]) -> None:
        self._answering.discard(task)
        self._deciding.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("authorization answer failed: %s", task.exception())

    async def _on_auth_request(self, msg: Any) -> None:
        if self.lease is None or not self.lease.valid():
            # Not (or no longer) the active authority: no answer, so no decision of a
            # thawed instance ever reaches the server; the active one answers.
            return
        try:
            decision = self.authorizer.decide(msg.data.decode(errors="replace"))
        except Exception:  # a bug must refuse one connection, never stop the authority
            log.exception("authorization request failed")
            return
        conn = decision.connection
        if conn is None:
            log.warning("refused a connection: %s", decision.reason)
        else:
            if conn.identity.kind in (Kind.SITE, Kind.HUB) and self.streams is not None:
                try:
                    await self.streams.site(conn.identity.site)
                except Exception as exc:  # the site may still connect; its start will retry
                    log.warning("could not prepare streams of %s: %s", conn.identity.site, exc)
            self.connections[(conn.server_id, conn.client_id)] = conn
            log.info("admitted %s %s (cid %d)", conn.identity.kind.value, conn.identity.name,
                     conn.client_id)
        if msg.reply and decision.response:
            await msg.respond(decision.response.encode())
        if conn is not None and self.records is not None:
            try:
                await self.records.put(conn)
            except Exception as exc:  # re-learned from the server at the next start
                log.warning("could not record cid %d: %s", conn.client_id, exc)

    async def _on_disconnect(self, msg: Any) -> None:
        try:
            data = json.loads(msg.data)
            key = (str(data["server"]["id"]), int(data["client"]["id"]))
        except (ValueError, KeyError, TypeError):
            return
        self.connections.pop(key, None)
        if self.records is not None:
            await self.records.delete(*key)

    async def _relearn(self) -> None:
        """Know again every connection the servers hold: restore those with a record, and
        disconnect those without one (they come back through a fresh decision)."""
        assert self.records is not None and self._sys is not None
        records = await self.records.all()
        live = await live_connections(self._sys, self.servers)
        restored = unknown = 0
        for key, user in live.items():
            if user == self.reader_key:
                continue  # this authority's own reader
            record = records.get(key)
            if record is not None and record.identity.name == user:
                self.connections[key] = record.connection()
                restored += 1
                continue
            unknown += 1
            await self._kick_cid(key[0], key[1], f"{user or 'a connection'} has no record")
        for key in set(records) - set(live):
            await self.records.delete(*key)
        log.info("re-learned %d connection(s) from the server; disconnected %d unknown",
                 restored, unknown)
        for key, conn in list(self.connections.items()):
            if not self.authorizer.still_allowed(conn):
                await self._kick(key, conn)

    # -- keeping connections within their rights ----------------------------------------

    async def _sweeper(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._sweep.wait()
            # A moment first, so the answer to the request that caused the change (a study
            # created, a site added) reaches its sender before the sender is disconnected.
            await asyncio.sleep(SWEEP_DELAY_S)
            self._sweep.clear()
            for key, conn in list(self.connections.items()):
                if not self.authorizer.still_allowed(conn):
                    await self._kick(key, conn)

    async def _kick(self, key: tuple[str, int], conn: Connection,
                    why: str = "its rights changed") -> None:
        self.connections.pop(key, None)
        await self._kick_cid(conn.server_id, conn.client_id,
                             f"{conn.identity.kind.value} {conn.identity.name}: {why}")

    async def _kick_cid(self, server_id: str, client_id: int, why: str) -> None:
        assert self._sys is not None
        if self.lease is None or not self.lease.valid():
            return  # a thawed instance's view is old: the active authority decides
        subject = sys_kick(server_id)
        try:
            await self._sys.request(subject, json.dumps({"cid": client_id}).encode(),
                                    timeout=2.0)
            log.info("disconnected cid %d (%s)", client_id, why)
        except Exception as exc:
            log.warning("could not disconnect cid %d: %s", client_id, exc)

    async def _renewals(self, stop: asyncio.Event) -> None:
        """Ask connections to reconnect before their user JWT expires: they come back with
        rights decided now, and the server never has to close them for an expired JWT."""
        margin = max(2.0, self.authorizer.session_s * RENEW_FRACTION)
        while not stop.is_set():
            await asyncio.sleep(min(margin / 2, 30.0))
            now = time.time()
            for key, conn in list(self.connections.items()):
                if conn.renewable and conn.expires and conn.expires - now < margin:
                    await self._kick(key, conn, "its session is renewed")

    async def _poll_revocations(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(REVOCATION_POLL_S)
            changed = self.kit_files.revocations()
            if self.kit_files.roots() or changed:
                self._sweep.set()


class _NoOrg:
    org = "unknown"
