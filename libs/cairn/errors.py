"""Cairn's error tree. Each error maps to one CLI exit code and one HTTP status.

    CairnError                  exit 1   500
    ├── InvalidInput            exit 3   400  (a file, spec, recipe or name is wrong)
    │   └── InvalidName         exit 3   400  (a name breaks the name rule)
    ├── NotFound                exit 4   404
    ├── PermissionDenied        exit 5   403
    ├── Conflict                exit 6   409  (rejected: the request clashes with state)
    ├── Unavailable             exit 7   503  (bus or service cannot be reached)
    ├── Timeout                 exit 8   504
    └── Unverified              exit 9   422  (a signature, digest or receipt does not verify)

Exit code 2 is a usage error (bad flags), exit 1 a failure of the thing asked for
(a job that failed, a validation that did not pass, evidence that verifies and records a
failed validation). `EXIT_CODES` is the table every reference is derived from (`cairn
--help`, docs/cli.md).
"""

from __future__ import annotations

from typing import ClassVar


class CairnError(Exception):
    """Root of every error Cairn raises on purpose."""

    exit_code: ClassVar[int] = 1
    http_status: ClassVar[int] = 500
    code: ClassVar[str] = "error"

    def __init__(self, message: str, *, field: str | None = None, file: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.file = file
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"

    def to_dict(self) -> dict[str, object]:
        """The typed error as sent in a reply."""
        out: dict[str, object] = {"code": self.code, "message": self.message}
        for key in ("field", "file", "line"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


class InvalidInput(CairnError):
    exit_code = 3
    http_status = 400
    code = "invalid"


class InvalidName(InvalidInput):
    code = "invalid-name"


class NotFound(CairnError):
    exit_code = 4
    http_status = 404
    code = "not-found"


class PermissionDenied(CairnError):
    exit_code = 5
    http_status = 403
    code = "permission-denied"


class Conflict(CairnError):
    exit_code = 6
    http_status = 409
    code = "conflict"


class Unavailable(CairnError):
    exit_code = 7
    http_status = 503
    code = "unavailable"


class Timeout(CairnError):
    exit_code = 8
    http_status = 504
    code = "timeout"


class Unverified(CairnError):
    """Evidence, a bundle, a receipt or a credential that does not verify: forged, tampered,
    signed by an untrusted or revoked key, or missing where it is required. Distinct from a
    valid record of a failure (exit 1) and from input that cannot be read at all (exit 3)."""

    exit_code = 9
    http_status = 422
    code = "unverified"


USAGE_EXIT = 2
"""click's code for a usage error: an unknown option, a missing argument, a bad choice."""
INTERRUPTED_EXIT = 130

EXIT_CODES: tuple[tuple[int, str, str], ...] = (
    (0, "ok", ""),
    (1, "what was asked for failed: a job failed, was aborted or unschedulable; a validation "
        "did not pass; valid evidence records a failed validation; `diff` or `recipe lint` "
        "found something", "CairnError"),
    (USAGE_EXIT, "usage error: unknown option, missing argument, bad choice (e.g. `-o DIR` "
                 "where `-o` is the output format)", "click"),
    (3, "invalid input: a file, spec, field or name is wrong (the message names file, line "
        "and field), or an id prefix matches several", "InvalidInput, InvalidName"),
    (4, "not found: study, job, site, recipe, bundle, dead letter", "NotFound"),
    (5, "permission denied: the signer's role does not allow it", "PermissionDenied"),
    (6, "conflict or rejected: the request clashes with state (exists, running)", "Conflict"),
    (7, "the bus or a service is unavailable: no federation, nothing answers", "Unavailable"),
    (8, "timed out", "Timeout"),
    (9, "does not verify: a forged or tampered bundle, a bad signature, an untrusted or "
        "revoked signer, a missing or invalid receipt", "Unverified"),
    (INTERRUPTED_EXIT, "interrupted (Ctrl-C)", ""),
)
"""(exit code, what it means, the error type that carries it): one meaning per code, the
same on every command."""


_BY_CODE: dict[str, type[CairnError]] = {
    cls.code: cls
    for cls in (CairnError, InvalidInput, InvalidName, NotFound, PermissionDenied, Conflict,
                Unavailable, Timeout, Unverified)
}


def from_dict(data: dict[str, object]) -> CairnError:
    """Rebuild a typed error from a reply (the inverse of `CairnError.to_dict`)."""
    cls = _BY_CODE.get(str(data.get("code", "error")), CairnError)
    line = data.get("line")
    return cls(
        str(data.get("message", "")),
        field=_opt_str(data.get("field")),
        file=_opt_str(data.get("file")),
        line=line if isinstance(line, int) else None,
    )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
