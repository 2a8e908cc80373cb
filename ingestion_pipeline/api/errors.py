"""Every error the API returns is JSON ``{"error": {"code", "message"}}`` with a fitting status."""

from __future__ import annotations

import re
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

T = TypeVar("T")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def not_found(what: str) -> ApiError:
    """Another tenant's object is answered exactly like one that does not exist (no existence leak)."""
    return ApiError(404, "not_found", f"no {what}")


def found(row: T | None, what: str) -> T:
    """``row``, or the 404 of ``not_found(what)`` when the tenant-scoped lookup found nothing."""
    if row is None:
        raise not_found(what)
    return row


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


def _body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


# Documented on every route, so the OpenAPI schema says what each status looks like.
COMMON_ERRORS = {
    400: {"model": ErrorBody, "description": "malformed request"},
    401: {"model": ErrorBody, "description": "missing, forged or expired token"},
    403: {"model": ErrorBody, "description": "the token's role may not do this"},
    404: {"model": ErrorBody, "description": "not found (or another tenant's)"},
    405: {"model": ErrorBody, "description": "method not allowed"},
    408: {"model": ErrorBody, "description": "the headers or the body stalled or trickled (INGESTION_API_*_SECONDS)"},
    413: {"model": ErrorBody, "description": "the body is over the limit (1 MiB for a request that is not an upload)"},
    503: {"model": ErrorBody, "description": "the database is unavailable or the server is busy"},
}


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path):
            methods.update(m.upper() for m in operations)
    return sorted(methods)


def install(app: FastAPI) -> None:
    import psycopg
    from botocore.exceptions import BotoCoreError, ClientError
    from psycopg_pool import PoolTimeout

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:  # every method the path has, not only those of the first route matched
            headers["Allow"] = ", ".join(_allowed_methods(app, request.url.path))
        return JSONResponse(_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers or None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        return JSONResponse(_body("invalid_request", "; ".join(parts) or "invalid request"), status_code=400)

    @app.exception_handler(ValueError)
    async def _bad_value(_request: Request, exc: ValueError) -> JSONResponse:
        # The library raises ValueError for input it refuses (the CLI's exit code 2), with the reason.
        return JSONResponse(_body("invalid_request", str(exc)), status_code=400)

    @app.exception_handler(psycopg.DataError)
    async def _bad_data(_request: Request, exc: psycopg.DataError) -> JSONResponse:
        return JSONResponse(_body("invalid_request", f"a value cannot be stored: {exc}"), status_code=400)

    @app.exception_handler(BotoCoreError)
    @app.exception_handler(ClientError)
    async def _s3_failed(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(_body("s3_error", f"S3 did not answer as expected: {exc}"), status_code=502)

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(PoolTimeout)
    async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(_body("database_unavailable", "the database is unavailable; try again shortly"),
                            status_code=503, headers={"Retry-After": "5"})
