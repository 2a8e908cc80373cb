"""Liveness and readiness: no token needed."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ingestion_pipeline.api.schemas import Health
from ingestion_pipeline.api.security import Services
from ingestion_pipeline.core.migrations import pending_migrations

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz() -> dict:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
async def readyz(services: Services):
    """The database answers and every migration is applied."""

    def check() -> list[str]:
        with services.db.connection() as conn:
            return pending_migrations(conn)

    try:
        pending = await run_in_threadpool(check)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the database means not ready
        return JSONResponse({"status": "unavailable", "detail": f"database: {type(exc).__name__}"}, status_code=503)
    if pending:
        return JSONResponse({"status": "unavailable", "detail": f"migrations pending: {', '.join(pending)}"},
                            status_code=503)
    return {"status": "ready"}
