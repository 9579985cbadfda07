"""Stream and consumer configuration: Cairn's StreamSpec to JetStream's config."""

from __future__ import annotations

from typing import Any

from nats.js import api
from nats.js.errors import BadRequestError, NotFoundError

from cairn.subjects import StreamSpec

MAX_CONSUMERS = 100_000
"""Consumers a stream may have. nats-server 2.15 caps a stream that names no limit at 1,000
(and reads -1 as "no limit named"), but a study's stream holds a durable consumer per site
and service: the thousandth site of a federation could not start. Named here instead, high
enough for ten thousand sites, low enough to still stop a runaway client."""


def stream_config(spec: StreamSpec, replicas: int = 1) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        description=spec.description or None,
        subjects=list(spec.subjects),
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE,
        max_age=spec.max_age_s or None,
        max_bytes=spec.max_bytes,
        duplicate_window=spec.duplicate_window_s,
        deny_delete=spec.deny_delete,
        deny_purge=spec.deny_purge,
        allow_direct=True,
        allow_rollup_hdrs=spec.allow_rollup,
        num_replicas=replicas,
        max_consumers=MAX_CONSUMERS,
    )


async def ensure_stream(js: Any, spec: StreamSpec, replicas: int = 1) -> None:
    """Create the stream with `replicas` copies, or bring an existing one to the spec
    (subjects, limits; its replicas are the operator's once it exists)."""
    config = stream_config(spec, replicas)
    try:
        info = await js.stream_info(spec.name)
    except NotFoundError:
        try:
            await js.add_stream(config)
            return
        except BadRequestError as exc:
            # Another process created it between our look and our add.
            if exc.err_code != 10058:
                raise
            info = await js.stream_info(spec.name)
    current = info.config
    if (sorted(current.subjects or []) != sorted(config.subjects or [])
            or bool(current.deny_delete) != spec.deny_delete
            or bool(current.deny_purge) != spec.deny_purge
            or bool(current.allow_rollup_hdrs) != spec.allow_rollup
            or current.max_consumers != config.max_consumers):
        config.num_replicas = current.num_replicas
        await js.update_stream(config)
