"""A signed request verifies whatever spelling its sender's values had: what is signed is
the envelope as the receiver decodes it."""

from __future__ import annotations

from cairn import api
from cairn.events import RoleRequest
from cairn.trust.requests import canonical


def test_an_int_in_a_float_field_signs_as_the_receiver_reads_it() -> None:
    spec = api.JobRequest(name="x", roles=[RoleRequest(name="c", entrypoint="python x")],
                          timeout_s=600)  # type: ignore[arg-type]  # an int, as a caller may
    sent = api.Envelope(request=api.Submit(spec=spec), actor="a", study="s", nonce="n")
    received = api.decode_envelope(api.encode_envelope(sent), verb="submit", study="s")
    assert api.encode_envelope(sent) != api.encode_envelope(received)  # 600 vs 600.0
    assert canonical(sent) == canonical(received)
