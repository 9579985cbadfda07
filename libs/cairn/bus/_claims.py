"""Single-use keys in a KV bucket: the first `claim` of a key wins, every later one loses,
until the bucket's TTL removes it. Used for request nonces (`cairn.trust.requests`)."""

from __future__ import annotations

import asyncio
import logging

from nats.errors import Error as NatsError
from nats.js.api import StreamConfig
from nats.js.errors import (
    BucketNotFoundError,
    InvalidKeyError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)

from cairn.bus._connection import Bus
from cairn.errors import InvalidInput, Unavailable

log = logging.getLogger("cairn.bus")
# Any other failure of the server or the connection (no stream, no responders, closed,
# timed out): the answer is unknown, so the caller must refuse, never assume.
_UNREACHABLE = (NatsError, asyncio.TimeoutError, OSError)


class Claims:
    """A KV bucket of keys each claimed once (KV `create`: atomic, fails when the key
    exists), so two processes, or one before and after a restart, agree on who was first."""

    def __init__(self, kv: object, bucket: str, *, timeout: float) -> None:
        self._kv = kv
        self.bucket = bucket
        self._timeout = timeout

    async def claim(self, key: str, value: bytes = b"") -> bool:
        """True when this call created `key`; False when it was there already.

        Raises:
            InvalidInput: `key` is not a valid KV key.
            Unavailable: the bucket did not answer within the timeout.
        """
        try:
            async with asyncio.timeout(self._timeout):
                await self._kv.create(key, value)  # type: ignore[attr-defined]
        except KeyWrongLastSequenceError:
            return False
        except KeyNotFoundError:
            # It was there when `create` failed and gone when it looked again: claimed by
            # someone, then aged out.
            return False
        except InvalidKeyError:
            raise InvalidInput(f"{key[:40]!r} is not a valid key of KV {self.bucket}") from None
        except _UNREACHABLE as exc:
            raise Unavailable(f"KV {self.bucket} did not record the key "
                              f"({type(exc).__name__}): refused rather than unchecked") from None
        return True


async def claims(bus: Bus, bucket: str, *, ttl: float, timeout: float = 2.0,
                 max_bytes: int = 256 * 1024 * 1024) -> Claims:
    """Open the claims bucket `bucket`, creating it with keys that live `ttl` seconds; an
    existing bucket whose keys live shorter is given `ttl` (a shorter life would let a key
    be claimed again while what it guards is still valid).

    Raises:
        Unavailable: JetStream did not answer within `timeout`.
    """
    try:
        async with asyncio.timeout(timeout):
            try:
                handle = await bus.js.key_value(bucket)
            except (BucketNotFoundError, NotFoundError):
                handle = await bus.js.create_key_value(
                    bucket=bucket, history=1, ttl=ttl, max_bytes=max_bytes, replicas=bus.replicas,
                    description="single-use keys (request nonces), each kept for the TTL")
            await _at_least(bus, bucket, ttl)
    except _UNREACHABLE as exc:
        raise Unavailable(f"KV {bucket} cannot be opened ({type(exc).__name__})") from None
    return Claims(handle, bucket, timeout=timeout)


async def _at_least(bus: Bus, bucket: str, ttl: float) -> None:
    stream = f"KV_{bucket}"
    info = await bus.js.stream_info(stream)
    config: StreamConfig = info.config
    if config.max_age is not None and 0 < config.max_age < ttl:
        log.warning("KV %s keeps keys %.0fs, less than %.0fs: raising it", bucket,
                    config.max_age, ttl)
        config.max_age = ttl
        await bus.js.update_stream(config)
