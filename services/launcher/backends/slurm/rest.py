"""The REST driver: slurmrestd's API v0.0.38 with JWT auth, so the launcher need not run on a
login node (HPC centres often forbid long-running processes there).

    RestDriver("unix:/run/slurmrestd/slurmrestd.socket", user="cairn", token_file=...)
    RestDriver("http://slurm-api.hpc.example:6820", user="cairn", jwt_key="/etc/cairn/jwt.key")

Tokens: a fixed `token` (or `token_file`, re-read on every call so rotation needs no restart,
e.g. from `scontrol token username=cairn lifespan=...`), or minted here from the cluster's
`jwt_key` (HS256, claims `sun`, `iat`, `exp`, as `scontrol token` makes them). HTTP with the
standard library only, each request bounded by `timeout_s`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from cairn.errors import InvalidInput
from cairn.launcher.backends.errors import LaunchFailed
from cairn.launcher.backends.slurm.driver import SlurmUnavailable
from cairn.launcher.backends.slurm.script import JobRequest, rest_properties
from cairn.launcher.backends.slurm.states import JobStatus, from_job_json, from_slurmdb_json

API = "v0.0.38"
TOKEN_LIFESPAN_S = 600


def mint_token(key: bytes, user: str, *, now: float, lifespan_s: int = TOKEN_LIFESPAN_S) -> str:
    """A Slurm JWT for `user`, signed with the cluster's `jwt_key` (auth/jwt's HS256)."""
    def part(data: dict[str, Any]) -> str:
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    signing = part({"alg": "HS256", "typ": "JWT"}) + "." + part(
        {"exp": int(now) + lifespan_s, "iat": int(now), "sun": user})
    mac = hmac.new(key, signing.encode(), hashlib.sha256).digest()
    return signing + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.path)
        self.sock = sock


class RestDriver:
    """Drive Slurm through slurmrestd.

    Args:
        url: `unix:/path/to/socket` or `http(s)://host:port`.
        user: The Slurm user the token is for (jobs run as this user).
        token, token_file, jwt_key: Where the token comes from (exactly one).
        timeout_s: Bound on each HTTP request.
    """

    name = "rest"

    def __init__(self, url: str, *, user: str, token: str | None = None,
                 token_file: str | None = None, jwt_key: str | None = None,
                 timeout_s: float = 30.0) -> None:
        if sum(x is not None for x in (token, token_file, jwt_key)) != 1:
            raise InvalidInput("the slurm rest driver needs one of token, token_file or "
                               "jwt_key", field="slurm")
        parts = urlsplit(url)
        if parts.scheme not in ("unix", "http", "https"):
            raise InvalidInput(f"slurm rest url {url!r}: use unix:/path or http(s)://host:port",
                               field="slurm.url")
        self.url = url
        self._parts = parts
        self.user = user
        self._token = token
        self._token_file = Path(token_file) if token_file else None
        self._jwt_key = Path(jwt_key) if jwt_key else None
        self.timeout_s = timeout_s
        self._minted: tuple[str, float] | None = None

    async def submit(self, request: JobRequest, script_path: str) -> str:
        body = {"job": rest_properties(request), "script": request.script}
        status, answer = await self._call("POST", f"/slurm/{API}/job/submit", body)
        errors = _errors(answer)
        if status >= 400 or errors or not isinstance(answer.get("job_id"), int):
            raise LaunchFailed(f"slurmrestd refused the job: {errors or f'HTTP {status}'}")
        return str(answer["job_id"])

    async def jobs(self) -> dict[str, JobStatus]:
        status, answer = await self._call("GET", f"/slurm/{API}/jobs")
        if status >= 400:
            raise SlurmUnavailable(f"slurmrestd: GET jobs answered HTTP {status}: "
                                   f"{_errors(answer)}")
        listed = answer.get("jobs") or []
        statuses = (from_job_json(job) for job in listed if isinstance(job, dict))
        return {s.job_id: s for s in statuses}

    async def accounting(self, job_id: str) -> JobStatus | None:
        status, answer = await self._call("GET", f"/slurmdb/{API}/job/{quote(job_id)}")
        if status == 404:
            return None
        if status >= 400 and not answer.get("jobs"):
            # No dbd plugin loaded, or no accounting: nothing more to learn from here.
            return None
        for job in answer.get("jobs") or []:
            if isinstance(job, dict) and str(job.get("job_id")) == job_id:
                return from_slurmdb_json(job)
        return None

    async def cancel(self, job_id: str, signal: str | None = None) -> None:
        query = f"?signal={quote(signal)}" if signal else ""
        status, answer = await self._call("DELETE", f"/slurm/{API}/job/{quote(job_id)}{query}")
        text = json.dumps(_errors(answer))
        if status >= 400 and "completed" not in text.lower() and "invalid job id" \
                not in text.lower():
            raise SlurmUnavailable(f"slurmrestd: cancel {job_id} answered HTTP {status}: {text}")

    async def close(self) -> None:
        return None

    # -- HTTP -----------------------------------------------------------------------------

    def token(self) -> str:
        """The token to send now (minted tokens are renewed at half their lifespan)."""
        if self._token is not None:
            return self._token
        if self._token_file is not None:
            text = self._token_file.read_text().strip()
            return text.removeprefix("SLURM_JWT=")
        assert self._jwt_key is not None
        now = time.time()
        if self._minted is None or now >= self._minted[1]:
            token = mint_token(self._jwt_key.read_bytes(), self.user, now=now)
            self._minted = (token, now + TOKEN_LIFESPAN_S / 2)
        return self._minted[0]

    async def _call(self, method: str, path: str,
                    body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._request, method, path, body),
                                          self.timeout_s + 5)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            raise SlurmUnavailable(f"slurmrestd at {self.url} did not answer {method} {path}: "
                                   f"{type(exc).__name__}: {exc}") from exc

    def _request(self, method: str, path: str,
                 body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        parts = self._parts
        conn: http.client.HTTPConnection
        if parts.scheme == "unix":
            conn = _UnixConnection(parts.path, self.timeout_s)
        elif parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.netloc, timeout=self.timeout_s)
        else:
            conn = http.client.HTTPConnection(parts.netloc, timeout=self.timeout_s)
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token(),
                   "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, parts.path.rstrip("/") + path if parts.scheme != "unix"
                         else path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw.strip() else {}
        except ValueError:
            answer = {"errors": [{"error": raw[:200].decode(errors="replace")}]}
        if response.status in (401, 403):
            raise SlurmUnavailable(f"slurmrestd at {self.url} refused the token for user "
                                   f"{self.user!r} (HTTP {response.status})")
        return response.status, answer if isinstance(answer, dict) else {}


def _errors(answer: dict[str, Any]) -> list[str]:
    out = []
    for err in answer.get("errors") or []:
        if isinstance(err, dict):
            text = err.get("error") or err.get("description") or ""
            code = err.get("error_number") or err.get("errno")
            if text or code:
                out.append(f"{text} ({code})" if code else str(text))
    return out
