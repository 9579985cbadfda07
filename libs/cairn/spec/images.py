"""Image references: what a job or a site may write as an image."""

from __future__ import annotations

import re

# name[:tag][@sha256:<64 hex>]; no spaces, wildcards or shell characters, so a reference can
# never act as a pattern when matched against a site's approved list.
_REFERENCE = re.compile(
    r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
    r"(@sha256:[0-9a-f]{64})?$"
)
_HOST_PORT = re.compile(r"^(?P<host>[a-zA-Z0-9.-]+(:[0-9]+)?)/(?P<rest>.+)$")


def image_problem(reference: str) -> str | None:
    """None if `reference` is a well-formed image reference, else what is wrong with it."""
    ref = reference
    # A registry host may carry a port (`registry:5000/x`), which the tag rule would misread.
    match = _HOST_PORT.match(reference)
    if match and (
        "." in match.group("host")
        or ":" in match.group("host")
        or match.group("host") == "localhost"
    ):
        ref = match.group("rest")
        if not re.fullmatch(r"[a-zA-Z0-9.-]+(:[0-9]+)?", match.group("host")):
            return f"{reference!r} has a bad registry host"
    if not _REFERENCE.fullmatch(ref):
        if "@" in ref and not re.search(r"@sha256:[0-9a-f]{64}$", ref):
            return f"{reference!r}: a digest is written @sha256: and 64 lowercase hex digits"
        return (
            f"{reference!r} is not an image reference "
            "(example: registry.example/fl/numpy:1.2 or ...@sha256:<digest>)"
        )
    return None


def has_digest(reference: str) -> bool:
    """True when the reference pins its content with `@sha256:`."""
    return re.search(r"@sha256:[0-9a-f]{64}$", reference) is not None
