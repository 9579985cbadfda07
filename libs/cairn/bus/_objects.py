"""Content-addressed object stores, read and written through rights the broker can scope.

Two layouts, one code path:

- a NATS object store (`OBJ_<bucket>`: chunks on `$O.<bucket>.C.<nuid>`, the meta record on
  `$O.<bucket>.M.<base64 name>`), byte-compatible with every NATS client's object store;
- a job's files (`FILES_<study>`: `cairn.files.<study>.<job>.<digest>.m` and
  `...<digest>.c.<nuid>`), where the job is a subject token, so a worker's credential can be
  limited to its own job's files by subject, which a NATS object store cannot express.

NATS clients read an object through an ordered consumer whose creation names no consumer
(the API form any consumer's name can be slipped into) and find the meta record with a
request whose subject says nothing about which record; neither can be granted to anyone
the federation does not trust. Here the meta record is read by subject (`DIRECT.GET`) and the
chunks through one of the reader's own consumers (`cairn.bus._consumers`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nats.js import api
from nats.js.errors import NotFoundError

from cairn import subjects
from cairn.bus._connection import Bus
from cairn.bus._consumers import create_ephemeral, delete_consumer
from cairn.errors import InvalidInput, NotFound
from cairn.subjects.table import obj_chunk_subject, obj_meta_subject

CHUNK = 128 * 1024
WINDOW = 64
"""Chunks in flight at once when writing (each waits for its store's ack)."""
_DIGEST = "SHA-256="


@dataclass(frozen=True)
class Layout:
    """Where one store keeps an object's meta record and its chunks."""

    stream: str
    bucket: str
    meta: Callable[[str], str]
    chunks: Callable[[str, str], str]


def object_store_layout(bucket: str) -> Layout:
    def meta(name: str) -> str:
        return obj_meta_subject(bucket, base64.urlsafe_b64encode(name.encode()).decode())

    def chunks(_name: str, nuid: str) -> str:
        return obj_chunk_subject(bucket, nuid)

    return Layout(stream=subjects.obj_stream(bucket), bucket=bucket, meta=meta, chunks=chunks)


def job_files_layout(study: str, job: str) -> Layout:
    prefix = subjects.files_prefix(study, job)

    def meta(name: str) -> str:
        return f"{prefix}.{_digest_name(name)}.m"

    def chunks(name: str, nuid: str) -> str:
        return f"{prefix}.{_digest_name(name)}.c.{nuid}"

    return Layout(stream=subjects.files_stream(study).name, bucket=f"{study}/{job}",
                  meta=meta, chunks=chunks)


def _digest_name(name: str) -> str:
    if len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
        raise InvalidInput(f"a job file is named by its sha256, not {name!r}", field="digest")
    return name


def meta_record(name: str, bucket: str, nuid: str, data: bytes, chunks: int) -> dict[str, Any]:
    """An object's meta record, the fields of a NATS object store's `ObjectInfo` (JSON)."""
    return {"name": name, "bucket": bucket, "nuid": nuid, "size": len(data), "chunks": chunks,
            "mtime": datetime.now(UTC).isoformat(),
            "digest": _DIGEST + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode(),
            "options": {"max_chunk_size": CHUNK}}


class Objects:
    """A content-addressed store: an object's name is its sha256 (unless named)."""

    def __init__(self, bus: Bus, layout: Layout) -> None:
        self._bus = bus
        self.layout = layout

    async def info(self, name: str) -> dict[str, Any] | None:
        """The object's meta record, or None when there is none (or it was deleted)."""
        try:
            msg = await self._bus.js.get_last_msg(self.layout.stream, self.layout.meta(name),
                                                  direct=True)
        except NotFoundError:
            return None
        try:
            info: dict[str, Any] = json.loads(msg.data or b"{}")
        except ValueError:
            return None
        return None if info.get("deleted") else info

    async def put(self, data: bytes, *, name: str | None = None) -> str:
        """Store `data` (once: an object already there is not written again); its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        key = name or digest
        if await self.info(key) is not None:
            return digest
        nuid = os.urandom(12).hex()
        subject = self.layout.chunks(key, nuid)
        js = self._bus.js
        pending: list[asyncio.Future[Any]] = []
        count = 0
        for start in range(0, len(data), CHUNK):
            pending.append(await js.publish_async(subject, data[start:start + CHUNK]))
            count += 1
            if len(pending) >= WINDOW:
                await asyncio.gather(*pending)
                pending.clear()
        if pending:
            await asyncio.gather(*pending)
        meta = meta_record(key, self.layout.bucket, nuid, data, count)
        await js.publish(self.layout.meta(key), json.dumps(meta).encode(),
                         headers={"Nats-Rollup": "sub"}, timeout=10.0)
        return digest

    async def get(self, name: str, *, digest: str | None = None) -> bytes:
        """The object's bytes, checked against its digest (and `digest`, when given).

        Raises:
            NotFound: there is no such object.
            InvalidInput: what was read does not match its digest.
        """
        info = await self.info(name)
        if info is None:
            raise NotFound(f"object {name} not found")
        size, count, nuid = int(info.get("size") or 0), int(info.get("chunks") or 0), \
            str(info.get("nuid") or "")
        data = b"" if size == 0 else await self._chunks(self.layout.chunks(name, nuid), count)
        actual = hashlib.sha256(data)
        stored = str(info.get("digest") or "")
        if stored.upper().startswith(_DIGEST.upper()) and \
                base64.urlsafe_b64decode(stored[len(_DIGEST):]) != actual.digest():
            raise InvalidInput(f"object {name} does not match its recorded digest")
        expected = digest or (name if len(name) == 64 else None)
        if expected is not None and actual.hexdigest() != expected:
            raise InvalidInput(f"object {name} does not match its digest")
        return data

    async def _chunks(self, subject: str, count: int) -> bytes:
        config = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE,
                                    deliver_policy=api.DeliverPolicy.ALL,
                                    inactive_threshold=30.0, filter_subject=subject,
                                    mem_storage=True, max_waiting=1)
        info = await create_ephemeral(self._bus, self.layout.stream, config, purpose="object")
        name = str(info.name)
        psub = await self._bus.js.pull_subscribe_bind(consumer=name, stream=self.layout.stream)
        parts: list[bytes] = []
        try:
            while len(parts) < count:
                try:
                    msgs = await psub.fetch(min(256, count - len(parts)), timeout=5.0)
                except TimeoutError:
                    raise NotFound(f"object chunks on {subject}: {len(parts)} of {count} "
                                   "are there") from None
                parts += [bytes(m.data) for m in msgs]
        finally:
            try:
                await psub.unsubscribe()
            except Exception:
                pass
            await delete_consumer(self._bus, self.layout.stream, name)
        return b"".join(parts)


async def objects(bus: Bus, bucket: str) -> Objects:
    """A NATS object store bucket (made by the hub, or the authority, where it is missing)."""
    store = subjects.obj_stream(bucket)
    if not bus.consumer_names.restricted:
        try:
            await bus.js.stream_info(store)
        except NotFoundError:
            await bus.js.create_object_store(bucket)
    return Objects(bus, object_store_layout(bucket))


def job_files(bus: Bus, study: str, job: str) -> Objects:
    """One job's files: its workers' results and data-plane payloads."""
    return Objects(bus, job_files_layout(study, job))
