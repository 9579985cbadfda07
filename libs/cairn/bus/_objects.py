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

import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.js.errors import NotFoundError

from cairn import subjects
from cairn.bus._chunks import CHUNK, Parts, parts_of, read_chunks, rechunk, write_chunks
from cairn.bus._connection import Bus
from cairn.errors import InvalidInput, NotFound
from cairn.subjects.table import obj_chunk_subject, obj_meta_subject

_DIGEST = "SHA-256="
PAYLOADS_TOKEN = "p"
"""The subject token under a job's files that holds its data-plane payloads (deleted when
the job has ended and its grace passed), apart from its results (kept)."""
FILE_BLOCK = 1024 * 1024
"""How much of a file is read at once when it is stored."""

ChunkSource = Callable[[], Parts]
"""Makes the object's bytes, in parts of any size, each time it is called (twice: once for
the digest, once to send): a generator, or an async one."""


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


def job_files_layout(study: str, job: str, *, payloads: bool = False) -> Layout:
    prefix = subjects.files_prefix(study, job) + (f".{PAYLOADS_TOKEN}" if payloads else "")

    def meta(name: str) -> str:
        return f"{prefix}.{_digest_name(name)}.m"

    def chunks(name: str, nuid: str) -> str:
        return f"{prefix}.{_digest_name(name)}.c.{nuid}"

    return Layout(stream=subjects.files_stream(study).name,
                  bucket=f"{study}/{job}" + ("/payloads" if payloads else ""),
                  meta=meta, chunks=chunks)


def _digest_name(name: str) -> str:
    if len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
        raise InvalidInput(f"a job file is named by its sha256, not {name!r}", field="digest")
    return name


def meta_record(name: str, bucket: str, nuid: str, size: int, sha256: bytes,
                chunks: int) -> dict[str, Any]:
    """An object's meta record, the fields of a NATS object store's `ObjectInfo` (JSON)."""
    return {"name": name, "bucket": bucket, "nuid": nuid, "size": size, "chunks": chunks,
            "mtime": datetime.now(UTC).isoformat(),
            "digest": _DIGEST + base64.urlsafe_b64encode(sha256).decode(),
            "options": {"max_chunk_size": CHUNK}}


def file_source(path: Path) -> ChunkSource:
    """A file's bytes, `FILE_BLOCK` at a time (never the whole file in memory)."""
    def blocks() -> Iterable[bytes]:
        with path.open("rb") as fh:
            while block := fh.read(FILE_BLOCK):
                yield block
    return blocks


STORE_WAIT_S = 15.0
"""How long a read waits for a store that nothing answers for yet."""


class Objects:
    """A content-addressed store: an object's name is its sha256 (unless named)."""

    def __init__(self, bus: Bus, layout: Layout) -> None:
        self._bus = bus
        self.layout = layout

    async def info(self, name: str) -> dict[str, Any] | None:
        """The object's meta record, or None when there is none (or it was deleted).

        A store that nothing answers for yet (no responders: a study's artifacts, made by
        the authority a moment after the study was created) is asked again for a while.

        Raises:
            Unavailable: the store still did not answer after `STORE_WAIT_S`.
        """
        async def last() -> Any:
            try:
                return await self._bus.js.get_last_msg(self.layout.stream,
                                                       self.layout.meta(name), direct=True)
            except NotFoundError:
                return None

        msg = await self._bus.setup(last, what=f"the object store {self.layout.bucket}",
                                    budget=STORE_WAIT_S)
        if msg is None:
            return None
        try:
            info: dict[str, Any] = json.loads(msg.data or b"{}")
        except ValueError:
            return None
        return None if info.get("deleted") else info

    async def put(self, data: bytes, *, name: str | None = None) -> str:
        """Store `data` (once: an object already there is not written again); its sha256."""
        return await self.put_stream(lambda: (data,), name=name)

    async def put_file(self, path: Path, *, name: str | None = None) -> str:
        """Store a file, read as it is sent (memory: a window of chunks); its sha256."""
        return await self.put_stream(file_source(path), name=name)

    async def put_stream(self, source: ChunkSource, *, name: str | None = None) -> str:
        """Store the bytes `source` makes, in chunks, carrying on after a dropped connection
        without sending again the chunks already stored; their sha256.

        Raises:
            InvalidInput: `source` made different bytes the second time.
            Unavailable: the store took nothing for minutes.
        """
        sha, size = hashlib.sha256(), 0
        async for part in parts_of(source()):
            sha.update(part)
            size += len(memoryview(part).cast("B"))
        digest = sha.hexdigest()
        key = name or digest
        if await self.info(key) is not None:
            return digest
        nuid = os.urandom(12).hex()
        sent = hashlib.sha256()

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in rechunk(source()):
                sent.update(chunk)
                yield chunk

        count = await write_chunks(self._bus, self.layout.chunks(key, nuid), chunks())
        if sent.digest() != sha.digest():
            raise InvalidInput(f"object {key}: its bytes changed while they were stored")
        meta = meta_record(key, self.layout.bucket, nuid, size, sha.digest(), count)
        await self._bus.js.publish(self.layout.meta(key), json.dumps(meta).encode(),
                                   headers={"Nats-Rollup": "sub"}, timeout=10.0)
        return digest

    async def get(self, name: str, *, digest: str | None = None) -> bytes:
        """The object's bytes, checked against its digest (and `digest`, when given).

        Raises:
            NotFound: there is no such object.
            InvalidInput: what was read does not match its digest.
        """
        return b"".join([c async for c in self.get_stream(name, digest=digest)])

    async def get_file(self, name: str, path: Path, *, digest: str | None = None) -> Path:
        """Write the object to `path` as it is read (memory: a window of chunks); `path`
        appears only once the whole object is there and matches its digest."""
        partial = path.with_name(path.name + ".partial")
        try:
            with partial.open("wb") as fh:
                async for chunk in self.get_stream(name, digest=digest):
                    fh.write(chunk)
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
        return path

    async def get_stream(self, name: str, *, digest: str | None = None
                         ) -> AsyncIterator[bytes]:
        """The object's chunks as they are read; carries on from the last chunk after a
        dropped connection. The digest is checked once the last chunk is read: a caller
        keeps nothing until the iteration ends without an error.

        Raises:
            NotFound: there is no such object.
            InvalidInput: what was read does not match its digest or size.
        """
        info = await self.info(name)
        if info is None:
            raise NotFound(f"object {name} not found")
        size, count, nuid = int(info.get("size") or 0), int(info.get("chunks") or 0), \
            str(info.get("nuid") or "")
        actual, read = hashlib.sha256(), 0
        if size:
            async for chunk in read_chunks(self._bus, self.layout.stream,
                                           self.layout.chunks(name, nuid), count):
                actual.update(chunk)
                read += len(chunk)
                yield chunk
        stored = str(info.get("digest") or "")
        if stored.upper().startswith(_DIGEST.upper()) and \
                base64.urlsafe_b64decode(stored[len(_DIGEST):]) != actual.digest():
            raise InvalidInput(f"object {name} does not match its recorded digest")
        expected = digest or (name if len(name) == 64 else None)
        if expected is not None and actual.hexdigest() != expected:
            raise InvalidInput(f"object {name} does not match its digest")
        if read != size:
            raise InvalidInput(f"object {name} has {read} bytes, its record says {size}")


async def objects(bus: Bus, bucket: str) -> Objects:
    """A NATS object store bucket (made by the hub, or the authority, where it is missing)."""
    store = subjects.obj_stream(bucket)
    if not bus.consumer_names.restricted:
        async def find_or_make() -> None:
            try:
                await bus.js.stream_info(store)
            except NotFoundError:
                await bus.js.create_object_store(bucket, replicas=bus.replicas)

        await bus.setup(find_or_make, what=f"the object store {bucket}")
    return Objects(bus, object_store_layout(bucket))


def job_files(bus: Bus, study: str, job: str) -> Objects:
    """One job's files: its workers' results (kept after the job)."""
    return Objects(bus, job_files_layout(study, job))


def job_payloads(bus: Bus, study: str, job: str) -> Objects:
    """One job's data-plane payloads over the inline limit (deleted after the job ended
    and its grace passed: `cairn.coordinator.retention`)."""
    return Objects(bus, job_files_layout(study, job, payloads=True))
