"""JetStream under the federation's domain, for a parent on its site's leaf node.

nats-py names the API by the domain (`$JS.<domain>.API.>`), but still writes a bucket's keys
on `$KV.<bucket>.<key>`, which the federation's server does not take from a leaf node once
JetStream has a domain: it takes them as `$JS.<domain>.API.$KV.<bucket>.<key>` (what the Go
client writes). A bucket opened here writes there; it reads, as before, by the stored
subject.
"""

from __future__ import annotations

from typing import Any

from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

KV_PREFIX = "$KV."


class _DomainWrites:
    """A JetStream context as a bucket sees it: its writes go under the domain's prefix."""

    def __init__(self, js: JetStreamContext, prefix: str) -> None:
        self._inner = js
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        if subject.startswith(KV_PREFIX):
            subject = f"{self._prefix}.{subject}"
        return await self._inner.publish(subject, *args, **kwargs)


class DomainJetStream(JetStreamContext):
    """A JetStream context whose buckets write under the domain's API prefix."""

    async def key_value(self, bucket: str) -> KeyValue:
        handle = await super().key_value(bucket)
        handle._js = _DomainWrites(self, self._prefix)  # type: ignore[assignment]
        return handle
