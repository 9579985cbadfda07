"""The connections the authority admitted, kept where a restarted authority finds them.

Each admitted connection is written to KV `authority` (key: server id and client id) as it
is admitted and deleted when the server says it disconnected. A restarted authority reads
them back and asks every server for the connections it holds now (`CONNZ` over the system
account): a live connection with a record is known again, with its identity and rights; a
live connection with no record (admitted by an authority that died before writing it) is
disconnected, and comes back through a fresh decision. Either way every connection is under
current membership, revocations and job ends once the authority is ready.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import msgspec

from cairn.bus import Bus, kv_bucket
from cairn.subjects.table import SYS_CONNZ
from cairn.trust.authority import Connection
from cairn.trust.credentials import Identity
from cairn.trust.natsconfig import APP_ACCOUNT
from cairn.trust.permissions import Permissions

log = logging.getLogger("cairn.authority")

BUCKET = "authority"
CONNZ = SYS_CONNZ
PAGE = 1024
GATHER_S = 1.0


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """What is kept of one admitted connection."""

    server_id: str
    client_id: int
    identity: Identity
    user_key: str
    jti: str
    site_jti: str = ""
    permissions: Permissions
    studies: tuple[str, ...] = ()
    user_nkey: str = ""
    expires: int = 0
    renewable: bool = True

    @classmethod
    def of(cls, conn: Connection) -> Record:
        return cls(server_id=conn.server_id, client_id=conn.client_id, identity=conn.identity,
                   user_key=conn.user_key, jti=conn.jti, site_jti=conn.site_jti,
                   permissions=conn.permissions, studies=conn.studies,
                   user_nkey=conn.user_nkey, expires=conn.expires,
                   renewable=conn.renewable)

    def connection(self) -> Connection:
        return Connection(server_id=self.server_id, client_id=self.client_id,
                          identity=self.identity, user_key=self.user_key, jti=self.jti,
                          site_jti=self.site_jti, permissions=self.permissions,
                          studies=self.studies, user_nkey=self.user_nkey,
                          expires=self.expires, renewable=self.renewable)


def key_of(server_id: str, client_id: int) -> str:
    return f"{server_id}.{client_id}"


class Records:
    """KV `authority`: one record per admitted connection."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._kv: Any = None
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(Record)

    async def open(self) -> None:
        self._kv = await kv_bucket(self._bus, BUCKET)

    async def put(self, conn: Connection) -> None:
        await self._kv.put(key_of(conn.server_id, conn.client_id),
                           self._encoder.encode(Record.of(conn)))

    async def delete(self, server_id: str, client_id: int) -> None:
        try:
            await self._kv.delete(key_of(server_id, client_id))
        except Exception as exc:
            log.debug("could not delete the record of cid %d: %s", client_id, exc)

    async def all(self) -> dict[tuple[str, int], Record]:
        out: dict[tuple[str, int], Record] = {}
        try:
            keys = await self._kv.keys()
        except Exception:  # no keys yet
            return out
        for key in keys:
            try:
                entry = await self._kv.get(key)
                record = self._decoder.decode(entry.value or b"")
            except Exception as exc:  # a garbage record is a connection to re-decide
                log.warning("ignoring an unreadable connection record %s: %s", key, exc)
                continue
            out[(record.server_id, record.client_id)] = record
        return out


async def live_connections(sys_bus: Bus, servers: int | None = None
                           ) -> dict[tuple[str, int], str]:
    """Every client connection of the APP account on every server: (server id, cid) ->
    its authorized user (the name in its user JWT, or a static user's key).

    Replies are gathered for `GATHER_S`, as how many servers answer is not known; with
    `servers` (how many there are, for certain: `cairn up` runs one), once that many have
    answered a page."""
    nc = sys_bus.nc
    inbox = nc.new_inbox()
    replies: asyncio.Queue[bytes] = asyncio.Queue()

    async def on_reply(msg: Any) -> None:
        await replies.put(bytes(msg.data))

    sub = await nc.subscribe(inbox, cb=on_reply)
    found: dict[tuple[str, int], str] = {}
    try:
        offset = 0
        while True:
            body = {"acc": APP_ACCOUNT, "auth": True, "limit": PAGE, "offset": offset}
            await nc.publish(CONNZ, json.dumps(body).encode(), reply=inbox)
            more = False
            answered: set[str] = set()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + GATHER_S
            while (left := deadline - loop.time()) > 0 and \
                    (servers is None or len(answered) < servers):
                try:
                    data = await asyncio.wait_for(replies.get(), left)
                except TimeoutError:
                    break
                page = json.loads(data)
                server = str((page.get("server") or {}).get("id", ""))
                answered.add(server)
                conns = (page.get("data") or {}).get("connections") or []
                for c in conns:
                    found[(server, int(c.get("cid", 0)))] = str(c.get("authorized_user", ""))
                more = more or len(conns) >= PAGE
            if not more:
                return found
            offset += PAGE
    finally:
        await sub.unsubscribe()
