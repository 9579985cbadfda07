"""The Litestar application: routes, the caller dependency, errors as one JSON shape, and the
OpenAPI 3.1 document (`schemas/openapi.json` is this document, exported)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from cairn.errors import CairnError
from cairn.httpapi.clientcert import client_cert_of
from cairn.httpapi.context import ApiContext
from cairn.httpapi.models import ApiError
from cairn.httpapi.routes import ROUTES
from cairn.httpapi.scope import Caller

log = logging.getLogger("cairn.httpapi")

API_VERSION = "1.0.0"
"""The contract's version: the major changes when a stable path, field or status changes
(`docs/api.md`, compatibility)."""
MAX_BODY_BYTES = 1024 * 1024
_CODES = {400: "invalid", 401: "permission-denied", 403: "permission-denied",
          404: "not-found", 405: "method-not-allowed", 409: "conflict", 413: "too-large",
          422: "invalid", 429: "too-many", 503: "unavailable", 504: "timeout"}


def _error(status: int, code: str, message: str, field: str | None = None
           ) -> Response[ApiError]:
    return Response(ApiError(status=status, code=code, message=message, field=field),
                    status_code=status)


def _on_cairn_error(_request: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    assert isinstance(exc, CairnError)
    status = exc.http_status
    if status == 403 and exc.field in ("token", "authorization", "client-certificate"):
        status = 401  # no token, or one that does not check out: authenticate (again)
    return _error(status, exc.code, exc.message, exc.field)


def _on_http_error(_request: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    message = str(exc.detail)
    extra = exc.extra
    field = None
    if isinstance(extra, list) and extra and isinstance(extra[0], dict):
        first = extra[0]
        field = str(first.get("key") or "") or None
        message = f"{message}: {first.get('message', '')}".rstrip(": ")
    return _error(status, _CODES.get(status, "error"), message, field)


def _on_anything(_request: Request[Any, Any, Any], exc: Exception) -> Response[ApiError]:
    log.exception("unexpected error answering a request")
    return _error(500, "error", f"internal error ({type(exc).__name__}); see the API's log")


def build_app(ctx: ApiContext | Callable[[], ApiContext]) -> Litestar:
    """The application over `ctx`, or over what `ctx()` returns when a request comes (the
    service builds it before it connects, and its context after)."""
    current = ctx if callable(ctx) else (lambda: ctx)

    async def provide_ctx() -> ApiContext:
        return current()

    from cairn.httpapi.pages import PAGES, STATIC, token_of
    from cairn.httpapi.submit import SUBMIT_ROUTES

    async def provide_caller(request: Request[Any, Any, Any]) -> Caller:
        # The dashboard's cookie too, so its pages' live views read the event stream; and
        # the connection's client certificate (mutual TLS) where no token is sent.
        return current().caller(token_of(request), client_cert_of(request.scope))

    return Litestar(
        route_handlers=[*ROUTES, *SUBMIT_ROUTES, *PAGES, STATIC],
        dependencies={"ctx": Provide(provide_ctx), "caller": Provide(provide_caller)},
        exception_handlers={CairnError: _on_cairn_error, HTTPException: _on_http_error,
                            Exception: _on_anything},
        openapi_config=openapi_config(),
        request_max_body_size=MAX_BODY_BYTES,
        debug=False,
        logging_config=None,
    )


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Cairn HTTP API", version=API_VERSION,
        description="Reads scoped exactly as the bus scopes the caller's identity; writes "
                    "are the caller's own signed request envelopes, passed on unchanged.",
        path="/openapi", render_plugins=[JsonRenderPlugin()],
        components=Components(security_schemes={
            "bearer": SecurityScheme(
                type="http", scheme="bearer", bearer_format="cairn1",
                description="`cairn api token`: minted from your own credential, short-lived"),
            "mutualTLS": SecurityScheme(
                type="mutualTLS",
                description="your kit's client certificate (`client.pem`), issued by the "
                            "federation CA to your Cairn identity")}),
        security=[{"bearer": []}, {"mutualTLS": []}],
    )
