"""Cairn's error tree. Each error maps to one CLI exit code and one HTTP status.

    CairnError                  exit 1   500
    ├── InvalidInput            exit 3   400  (a file, spec, recipe or name is wrong)
    │   └── InvalidName         exit 3   400  (a name breaks the name rule)
    ├── NotFound                exit 4   404
    ├── PermissionDenied        exit 5   403
    ├── Conflict                exit 6   409  (rejected: the request clashes with state)
    ├── Unavailable             exit 7   503  (bus or service cannot be reached)
    └── Timeout                 exit 8   504

Exit code 2 is a usage error (bad flags), exit 1 a failure of the thing asked for
(a job that failed, a validation that did not pass).
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


_BY_CODE: dict[str, type[CairnError]] = {
    cls.code: cls
    for cls in (CairnError, InvalidInput, InvalidName, NotFound, PermissionDenied, Conflict,
                Unavailable, Timeout)
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
