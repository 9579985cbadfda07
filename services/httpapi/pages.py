"""The dashboard's pages (filled in below)."""

from __future__ import annotations

from pathlib import Path

from litestar.handlers import HTTPRouteHandler
from litestar.static_files import create_static_files_router

PAGES: list[HTTPRouteHandler] = []
STATIC = create_static_files_router(path="/static", directories=[Path(__file__).parent / "static"],
                                    name="static", include_in_schema=False)
