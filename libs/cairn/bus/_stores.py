"""KV buckets for derived views and object stores for large payloads."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

import msgspec
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    NoKeysError,
    NotFoundError,
    ObjectNotFoundError,
)

from cairn.bus._connection import Bus
from cairn.bus._poisoned import Skipper, UndecodableRecord
from cairn.errors import InvalidInput, NotFound
from cairn.events.decoding import decode_with

T = TypeVar("T")
log = logging.getLogger("cairn.bus")


class KV(Generic[T]):
    """A typed view over one KV bucket (values are msgspec JSON).

    A value that does not decode reads as absent (`get` None, skipped by `items`) and is
    handed to `on_undecodable` (which dead-letters it), so one garbage entry never stops a
    service that reads the bucket.
    """

    def __init__(self, kv: Any, type_: type[T], *, bucket: str = "",
                 on_undecodable: Skipper | None = None) -> None:
        self._kv = kv
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)
        self._encoder = msgspec.json.Encoder()
        self._bucket = bucket
        self._on_undecodable = on_undecodable

    async def put(self, key: str, value: T) -> int:
        return int(await self._kv.put(key, self._encoder.encode(value)))

    async def get(self, key: str) -> T | None:
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, NotFoundError):
            return None
        if entry.value is None:
            return None
        try:
            return decode_with(self._decoder, entry.value)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            record = UndecodableRecord(f"KV {self._bucket} key {key}: {exc}",
                                       store=f"KV_{self._bucket}", key=key,
                                       seq=int(entry.revision or 0), data=bytes(entry.value),
                                       subject=f"$KV.{self._bucket}.{key}")
            log.warning("skipping an undecodable entry: %s", record.message)
            if self._on_undecodable is not None:
                await self._on_undecodable(record)
            return None

    async def delete(self, key: str) -> None:
        await self._kv.delete(key)

    async def keys(self) -> list[str]:
        try:
            return sorted(await self._kv.keys())
        except NoKeysError:
            return []

    async def items(self) -> AsyncIterator[tuple[str, T]]:
        for key in await self.keys():
            value = await self.get(key)
            if value is not None:
                yield key, value


async def kv(bus: Bus, bucket: str, type_: type[T], *, history: int = 1,
             ttl: float | None = None, on_undecodable: Skipper | None = None) -> KV[T]:
    """Open a KV bucket, creating it when absent (see `KV` for `on_undecodable`)."""
    try:
        handle = await bus.js.key_value(bucket)
    except (BucketNotFoundError, NotFoundError):
        handle = await bus.js.create_key_value(bucket=bucket, history=history, ttl=ttl)
    return KV(handle, type_, bucket=bucket, on_undecodable=on_undecodable)


class Objects:
    """A content-addressed object store: an object's name is its sha256."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def put(self, data: bytes, *, name: str | None = None) -> str:
        digest = hashlib.sha256(data).hexdigest()
        key = name or digest
        try:
            info = await self._store.get_info(key)
            if info is not None and not getattr(info, "deleted", False):
                return digest
        except (ObjectNotFoundError, NotFoundError, KeyNotFoundError):
            pass
        await self._store.put(key, data)
        return digest

    async def get(self, name: str, *, digest: str | None = None) -> bytes:
        try:
            result = await self._store.get(name)
        except (ObjectNotFoundError, NotFoundError, KeyNotFoundError):
            raise NotFound(f"object {name} not found") from None
        data = bytes(result.data or b"")
        expected = digest or (name if len(name) == 64 else None)
        if expected is not None and hashlib.sha256(data).hexdigest() != expected:
            raise InvalidInput(f"object {name} does not match its digest")
        return data


async def objects(bus: Bus, bucket: str) -> Objects:
    try:
        store = await bus.js.object_store(bucket)
    except (BucketNotFoundError, NotFoundError):
        store = await bus.js.create_object_store(bucket)
    return Objects(store)
