"""Cairn's bus: the only package that imports `nats`.

Publish (with `Nats-Msg-Id` = event id and W3C trace context), durable pull consumers with
bounded redelivery and dead letters, replay from a sequence or a time, KV and object stores.
"""

from cairn.bus import _lazyws  # noqa: F401, I001 - first: how nats is imported (see there)
from cairn.bus._checked import decode_event
from cairn.bus._claims import Claims, claims
from cairn.bus._connection import CONTENT_TYPE, JSON, MSG_ID, MSGPACK, Bus, NoResponders
from cairn.bus._consume import Delivery, Handler, Subscription
from cairn.bus._consumers import ConsumerNames
from cairn.bus._fence import Fence, Fenced
from cairn.bus._lease import LEASE_HEADER, Lease, LeaseLost, LeaseRecord
from cairn.bus._objects import ChunkSource, Objects, file_source, job_files, job_payloads, objects
from cairn.bus._poisoned import (
    StoredMessage,
    UndecodableRecord,
    last_stored,
    report_skipped,
    skipper,
)
from cairn.bus._replay import Replayed, replay
from cairn.bus._stores import KV, kv, kv_bucket

__all__ = ["CONTENT_TYPE", "JSON", "KV", "LEASE_HEADER", "MSGPACK", "MSG_ID", "Bus", "ChunkSource",
           "Claims", "ConsumerNames", "Delivery", "Fence", "Fenced", "Handler", "Lease",
           "LeaseLost", "LeaseRecord",
           "NoResponders", "Objects", "Replayed", "StoredMessage", "Subscription",
           "UndecodableRecord", "claims", "decode_event", "file_source", "job_files",
           "job_payloads", "kv", "kv_bucket", "last_stored", "objects", "replay",
           "report_skipped", "skipper"]
