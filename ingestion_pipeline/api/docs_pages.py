"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc``, from files the API serves itself.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so without internet (these deployments often have
none) ``/docs`` was a blank page. The files come from the ``fastapi-offline`` package (Swagger UI 5, which
renders OpenAPI 3.1 as FastAPI writes it, and ReDoc), served under ``/docs-static``; the pages are FastAPI's own
(``get_swagger_ui_html``, ``get_redoc_html``) pointed at them, as FastAPI documents for self-hosting.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(fastapi_offline.__file__).parent / "static"
STATIC_URL = "/docs-static"


def install(app: FastAPI) -> None:
    """Serve ``/docs``, its OAuth2 redirect and ``/redoc`` on ``app`` (created with ``docs_url=None`` and
    ``redoc_url=None``), with their scripts and styles under ``STATIC_URL``."""
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="docs-static")
    redirect_url = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect_url}", swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css", swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png")

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - ReDoc",
                              redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png", with_google_fonts=False)
