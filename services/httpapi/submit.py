"""Submit a job with its code in one HTTP request: the caller's signed submit envelope and the
code bundle it names, as two parts of a multipart form.

The HTTP layer still adds no authority of its own. The envelope is the caller's, signed with
the caller's key, and names the bundle by its sha256 (`spec.code_digest`), so the signature
covers the code; the API stores the bundle only when that signature checks out, the signer
is the caller, the caller may write the study's code bundles on the bus (its own rights,
derived from the subject table as the broker's are), and the bytes hash to the digest
signed. The store is content-addressed and every launcher checks a bundle against the digest
its job names, so what the API writes can only ever be code some caller signed for. The
envelope is then passed on unchanged, as `POST .../requests` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Request
from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Response

from cairn import api, subjects
from cairn.errors import InvalidInput, PermissionDenied
from cairn.httpapi.context import ApiContext
from cairn.httpapi.routes import Ctx, Name, Who, envelope_of, pass_on, write
from cairn.httpapi.scope import matches
from cairn.names import check_name

MAX_BUNDLE_BYTES = 64 * 1024 * 1024
"""The largest code bundle one HTTP submit carries (it is held in memory while checked);
a larger one is uploaded by `cairn job submit` over the bus."""
_SLACK = 64 * 1024  # the form's own framing and the envelope


@dataclass
class SubmitForm:
    envelope: UploadFile
    """The signed `submit` request envelope, exactly as `cairn api sign-submit` prints it."""
    bundle: UploadFile
    """The code bundle whose sha256 the envelope's `spec.code_digest` names."""


@write("/v1/studies/{study:str}/submit", status_code=200,
       request_max_body_size=MAX_BUNDLE_BYTES + _SLACK,
       summary="Submit a job with its code: the caller's signed submit and its code bundle",
       description="A `multipart/form-data` body of two parts: `envelope`, the caller's own "
                   "signed submit request (`cairn api sign-submit`), and `bundle`, the code "
                   "bundle it names by sha256. The bundle is stored in the study's code "
                   "bundles only if the envelope is the caller's, signed, and names its "
                   "digest, and the caller may write them; the envelope is then passed on "
                   "unchanged and the answer is the coordinator's reply.")
async def submit_with_code(
        ctx: Ctx, caller: Who, request: Request[Any, Any, Any], study: Name,
        data: Annotated[SubmitForm, Body(media_type=RequestEncodingType.MULTI_PART)]
) -> Response[bytes]:
    check_name(study, "study")
    raw = await data.envelope.read(MAX_BUNDLE_BYTES)
    envelope = envelope_of(ctx, raw, study, field="envelope")
    if not isinstance(envelope.request, api.Submit):
        raise InvalidInput("the envelope of a submit with code must be a submit request",
                           field="request.type")
    digest = envelope.request.spec.code_digest
    if not digest:
        raise InvalidInput("the envelope names no code bundle (spec.code_digest)",
                           field="spec.code_digest")
    bundle = await data.bundle.read(MAX_BUNDLE_BYTES + 1)
    if len(bundle) > MAX_BUNDLE_BYTES:
        raise InvalidInput(f"a code bundle sent over HTTP is at most {MAX_BUNDLE_BYTES} bytes "
                           "(`cairn job submit` uploads larger ones over the bus)",
                           field="bundle")
    if hashlib.sha256(bundle).hexdigest() != digest:
        raise InvalidInput("the bundle's sha256 is not the digest the envelope signs "
                           f"(spec.code_digest {digest[:12]}...)", field="bundle")
    if ctx.secure:
        _check_signer_may_store(ctx, caller_name=caller.name, raw=raw, envelope=envelope,
                                study=study)
    from cairn.bus import objects

    await (await objects(ctx.bus, subjects.obj_artifacts(study))).put(bundle)
    return await pass_on(ctx, study, envelope, raw)


def _check_signer_may_store(ctx: ApiContext, *, caller_name: str, raw: bytes,
                            envelope: api.Envelope, study: str) -> None:
    """Raises PermissionDenied unless the envelope's signature checks out, its signer is the
    caller, and the signer may write `study`'s code bundles on the bus."""
    from cairn.trust.credentials import verify_credential
    from cairn.trust.permissions import permissions
    from cairn.trust.requests import MemoryNonces, RequestVerifier

    assert ctx.roots is not None
    # Everything but the nonce's use: the coordinator records that, once, when it decides.
    RequestVerifier(ctx.roots, MemoryNonces()).check(raw, envelope, study=study)
    signer = verify_credential(envelope.key_id or "", ctx.roots)
    ctx.revocations.check(signer, "key_id")
    if signer.identity.name != caller_name:
        raise PermissionDenied(f"the envelope is signed by {signer.identity.name}, not by you "
                               f"({caller_name}): send your own", field="key_id")
    granted = permissions(signer.identity, signer.user_key, ctx.membership())
    chunk = f"$O.{subjects.obj_artifacts(study)}.C.probe"
    if not any(matches(p, chunk) for p in granted.pub_allow):
        raise PermissionDenied(f"{signer.identity.name} may not store code bundles in study "
                               f"{study}", field="key_id")


SUBMIT_ROUTES = [submit_with_code]
