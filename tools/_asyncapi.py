"""The AsyncAPI 3.0 document of Cairn's events: channels, messages, who sends and receives.

One channel per subject pattern of DESIGN.md's table (`tools._schemas.CHANNELS`); the messages
are the event types, their payloads the JSON Schemas in `events/`; operations say, per service,
what it sends (from `WRITERS`) and what it receives.
"""

from __future__ import annotations

from typing import Any

import cairn
from cairn.events import Event
from tools._schemas import (
    CHANNELS,
    GENERATED_BY,
    NAMED,
    SERVICES,
    Channel,
    Placement,
    placeholder,
    stream_of,
)

PARAMETERS = {
    "study": "a study name",
    "job": "a job id (`j-` and a lowercase ULID)",
    "site": "a site name",
    "role": "a role of the job",
    "recipe": "a recipe name (no version: versions have dots)",
    "service": "a service name",
    "stream": "the stream the message came from",
    "verb": "what is asked",
    "event": "the event: the last token of its tag",
    "path": "one or more tokens the job's workers choose (an address cannot spell `>`)",
}
# What every message carries besides its payload (`cairn.bus` writes both).
HEADERS = {
    "type": "object",
    "properties": {
        "Nats-Msg-Id": {
            "type": "string",
            "description": "the event id: JetStream drops duplicates within its window",
        },
        "traceparent": {"type": "string", "description": "W3C trace context of the publish"},
    },
}
# Requests and replies on `cairn.api.*` (schemas from `cairn.api`, see tools/_api_schemas.py).
API_MESSAGES = (
    ("api.request", "Envelope", "./api/envelope.json",
     "a typed request (`type` is the verb) in the envelope a client signs"),
    ("api.reply", "Reply", "./api/reply.json",
     "the answer: `ok` and a typed `result`, or an `error` naming its code"),
)
NAME_RULE_NOTE = "; a single token that obeys `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`"


def _summary(cls: type[Event]) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else cls.__name__


def _parameters(channel: Channel, places: list[Placement]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for token_index, token in enumerate(channel.address.split(".")):
        if not token.startswith("{"):
            continue
        name = token[1:-1]
        doc = PARAMETERS[name] + (NAME_RULE_NOTE if name in NAMED else "")
        param: dict[str, Any] = {"description": doc}
        # Where events fill the token with literals (their verbs), those are all it takes.
        values = sorted({p.subject.split(".")[token_index] for p in places} - {token})
        if values and all(not v.startswith("{") for v in values):
            param["enum"] = values
        params[name] = param
    return params


def _ref(*parts: str) -> dict[str, str]:
    return {"$ref": "#/" + "/".join(parts)}


def asyncapi(places: list[Placement]) -> dict[str, Any]:
    """The AsyncAPI 3.0 document: channels, messages and who sends / receives what."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for p in places:
        messages[p.tag] = {
            "name": p.tag,
            "title": p.cls.__name__,
            "summary": _summary(p.cls),
            "contentType": "application/json",
            "headers": _ref("components", "schemas", "headers"),
            "payload": {
                "schemaFormat": "application/schema+json;version=draft-2020-12",
                "schema": {"$ref": f"./events/{p.tag}.json"},
            },
            "x-cairn-writer": p.writer,
            "x-cairn-stream": p.stream,
        }
    for name, title, schema, summary in API_MESSAGES:
        messages[name] = {
            "name": name,
            "title": title,
            "summary": summary,
            "contentType": "application/json",
            "payload": {
                "schemaFormat": "application/schema+json;version=draft-2020-12",
                "schema": {"$ref": schema},
            },
        }
    for channel in CHANNELS:
        mine = [p for p in places if p.channel is channel]
        stored = {p.stream for p in mine} if mine else {stream_of(placeholder(channel.address))}
        entry: dict[str, Any] = {
            "address": channel.address,
            "summary": channel.summary,
            "parameters": _parameters(channel, mine),
        }
        if mine:
            entry["messages"] = {p.tag: _ref("components", "messages", p.tag) for p in mine}
        elif _is_api(channel):
            entry["messages"] = {m[0]: _ref("components", "messages", m[0]) for m in API_MESSAGES}
        entry["x-cairn-stream"] = (
            None if channel.request_reply else " | ".join(sorted(s or "not stored" for s in stored))
        )
        channels[channel.id] = entry
        for writer in channel.writers:
            sent = [p.tag for p in mine if p.writer == writer]
            if mine and not sent:
                continue
            operations[f"{writer}.send.{channel.id}"] = _operation(
                "send", channel, writer, sent, request_reply=channel.request_reply
            )
        for reader in channel.readers:
            operations[f"{reader}.receive.{channel.id}"] = _operation(
                "receive",
                channel,
                reader,
                [p.tag for p in mine],
                request_reply=channel.request_reply,
            )
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Cairn events",
            "version": cairn.__version__,
            "description": (
                "Every fact Cairn records is an event on NATS JetStream: JSON (msgspec) with a "
                "`type` tag, the event id in the `Nats-Msg-Id` header and W3C trace context in "
                "`traceparent`. Readers must ignore unknown fields; new fields get defaults; "
                "a breaking change is a new tag. This document is " + GENERATED_BY + "."
            ),
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": {"headers": HEADERS},
            "messages": messages,
        },
    }


def _operation(
    action: str, channel: Channel, service: str, tags: list[str], *, request_reply: bool
) -> dict[str, Any]:
    who = SERVICES[service]
    op: dict[str, Any] = {
        "action": action,
        "channel": _ref("channels", channel.id),
        "summary": f"{who} {action}s {'requests on' if request_reply else 'on'} {channel.address}",
        "x-cairn-service": who,
    }
    if tags:
        op["messages"] = [_ref("channels", channel.id, "messages", t) for t in tags]
    elif _is_api(channel):
        op["messages"] = [_ref("channels", channel.id, "messages", "api.request")]
        op["reply"] = {"messages": [_ref("channels", channel.id, "messages", "api.reply")]}
    return op


def _is_api(channel: Channel) -> bool:
    return channel.request_reply and channel.address.startswith("cairn.api.")
