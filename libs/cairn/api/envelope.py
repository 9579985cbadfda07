"""The request envelope: who asks, for which study, and the typed request.

    {"actor": "alice@org-a", "study": "lung", "nonce": null, "expires": null,
     "key_id": null, "signature": null, "request": {"type": "submit", "spec": {...}}}

This one Struct is what a client signs (`nonce`, `expires`, `key_id` and `signature` are
reserved for request signing) and what a service checks. A service decodes it once
(`decode_envelope`), checks it against the subject it arrived on, and `match`es on `request`.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from cairn.api.replies import ErrorBody, Reply, Result
from cairn.api.requests import Request, verb_of
from cairn.errors import CairnError, InvalidInput
from cairn.events.decoding import decode_with

MAX_REQUEST_BYTES = 1024 * 1024
"""A request larger than this is refused before it is decoded."""


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """One request on `cairn.api.*`.

    Attributes:
        request: The typed request; its tag is the subject's last token.
        actor: Who asks (an admin's name, a service identity).
        study: The study a study verb acts on (equal to the subject's study token).
        nonce: A single-use value, so a signed request cannot be replayed.
        expires: When a signed request stops being valid.
        key_id: The id of the key that signed it.
        signature: The signature over the envelope with `signature` empty (base64).
    """

    request: Request
    actor: str | None = None
    study: str | None = None
    nonce: str | None = None
    expires: datetime | None = None
    key_id: str | None = None
    signature: str | None = None


ENCODER = msgspec.json.Encoder()
_ENVELOPE = msgspec.json.Decoder(Envelope)
_REPLY = msgspec.json.Decoder(Reply)


def encode_envelope(envelope: Envelope) -> bytes:
    return ENCODER.encode(envelope)


def decode_envelope(data: bytes, *, verb: str, study: str | None = None) -> Envelope:
    """Decode a request that arrived on a subject ending in `verb` (of `study`, for study
    verbs).

    Raises:
        InvalidInput: not an envelope, too large, or not the request this subject carries.
    """
    if len(data) > MAX_REQUEST_BYTES:
        raise InvalidInput(f"request of {len(data)} bytes is over the {MAX_REQUEST_BYTES} "
                           f"byte limit")
    try:
        envelope = decode_with(_ENVELOPE, data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"malformed request: {exc}") from None
    tag = verb_of(envelope.request)
    if tag != verb:
        raise InvalidInput(f"a {tag!r} request sent on a {verb!r} subject", field="request.type")
    if study is not None and envelope.study not in (None, study):
        raise InvalidInput(f"request for study {envelope.study} sent on study {study}'s subject",
                           field="study")
    return envelope


def encode_result(result: Result) -> bytes:
    return ENCODER.encode(Reply(ok=True, result=result))


def encode_error(exc: CairnError) -> bytes:
    return ENCODER.encode(Reply(ok=False, error=ErrorBody.of(exc)))


def decode_reply(data: bytes, *, subject: str) -> Result:
    """The result of a reply, or the typed error it carries, raised.

    Raises:
        CairnError: the subclass the service answered with; `InvalidInput` when the answer
            is not a reply.
    """
    try:
        reply = decode_with(_REPLY, data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"the answer on {subject} is not a reply: {exc}") from None
    if not reply.ok or reply.result is None:
        error = reply.error or ErrorBody(code="error", message="request failed (no error given)")
        raise error.error()
    return reply.result
