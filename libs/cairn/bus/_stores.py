"""KV buckets: typed views, keys listed through the reader's own consumers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

import msgspec
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

from cairn import subjects
from cairn.bus._connection import Bus
from cairn.bus._poisoned import Skipper, UndecodableRecord
from cairn.bus._replay import Replayed, replay
from cairn.errors import NotFound
from cairn.events.decoding import decode_with
from cairn.subjects.table import kv_subject

T = TypeVar("T")
log = logging.getLogger("cairn.bus")


class KV(Generic[T]):
    """A typed view over one KV bucket (values are msgspec JSON).

    A value that does not decode reads as absent (`get` None, skipped by `items`) and is
    handed to `on_undecodable` (which dead-letters it), so one garbage entry never stops a
    service that reads the bucket.
    """

    def __init__(self, kv: Any, type_: type[T], *, bucket: str = "",
                 on_undecodable: Skipper | None = None, bus: Bus | None = None) -> None:
        self._kv = kv
        self._bus = bus
        self._decoder: msgspec.json.Decoder[T] = msgspec.json.Decoder(type_)
        self._encoder = msgspec.json.Encoder()
        self._bucket = bucket
        self._on_undecodable = on_undecodable

    async def put(self, key: str, value: T, *, timeout: float = 30.0) -> int:
        """Store `value` under `key`; returns its revision.

        Asked again for `timeout` seconds while JetStream does not answer (a cluster electing
        the bucket's leader after a server died): a record a service writes before it acts
        on it must not be lost to a few seconds' election. `timeout=0` tries once (a
        heartbeat, outdated by the next one). The same value written twice is harmless.

        Raises:
            Unavailable: JetStream still did not answer.
        """
        data = self._encoder.encode(value)
        if self._bus is None:
            return int(await self._kv.put(key, data))
        return int(await self._bus.setup(lambda: self._kv.put(key, data),
                                         what=f"put {key} in {self._bucket}", budget=timeout))

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
                                       subject=kv_subject(self._bucket, key))
            log.warning("skipping an undecodable entry: %s", record.message)
            if self._on_undecodable is not None:
                await self._on_undecodable(record)
            return None

    async def delete(self, key: str, *, timeout: float = 30.0) -> None:
        """Delete `key` (asked again for `timeout` seconds, as `put`)."""
        if self._bus is None:
            await self._kv.delete(key)
            return
        await self._bus.setup(lambda: self._kv.delete(key),
                              what=f"delete {key} in {self._bucket}", budget=timeout)

    async def keys(self) -> list[str]:
        """Every key with a value now (deleted and purged ones are not)."""
        assert self._bus is not None
        prefix = kv_subject(self._bucket, "")
        keys = []
        items: AsyncIterator[Replayed[None]] = replay(
            self._bus, subjects.kv_stream(self._bucket), None, filters=[f"{prefix}>"],
            last_per_subject=True, headers_only=True)
        try:
            async for item in items:
                operation = (item.headers or {}).get("KV-Operation", "")
                if operation not in ("DEL", "PURGE"):
                    keys.append(item.subject.removeprefix(prefix))
        except NotFound:
            return []
        return sorted(keys)

    async def items(self) -> AsyncIterator[tuple[str, T]]:
        for key in await self.keys():
            value = await self.get(key)
            if value is not None:
                yield key, value


async def kv_bucket(bus: Bus, name: str, *, history: int = 1,
                    ttl: float | None = None) -> Any:
    """The KV bucket `name` as the client library has it, made when absent; asked again
    while JetStream does not answer (a new cluster electing its leaders)."""
    async def find_or_make() -> Any:
        try:
            return await bus.js.key_value(name)
        except (BucketNotFoundError, NotFoundError):
            return await bus.js.create_key_value(bucket=name, history=history, ttl=ttl,
                                                 replicas=bus.replicas)

    return await bus.setup(find_or_make, what=f"the bucket {name}")


async def kv(bus: Bus, bucket: str, type_: type[T], *, history: int = 1,
             ttl: float | None = None, on_undecodable: Skipper | None = None) -> KV[T]:
    """Open a KV bucket, creating it when absent (see `KV` for `on_undecodable`)."""
    handle = await kv_bucket(bus, bucket, history=history, ttl=ttl)
    return KV(handle, type_, bucket=bucket, on_undecodable=on_undecodable, bus=bus)
