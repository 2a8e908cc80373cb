"""``create_app``: the FastAPI application, its routers, its error shape and its shared services."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from ingestion_pipeline.api import docs_pages, errors, web_session
from ingestion_pipeline.api.body_bounds import BodyBounds
from ingestion_pipeline.api.file_events import FileEvents
from ingestion_pipeline.api.login_guard import LoginGuard
from ingestion_pipeline.api.read_slots import RefuseOverShare, TenantReadSlots
from ingestion_pipeline.api.routes import (
    auth,
    documents,
    evaluations,
    files,
    health,
    ingest,
    metrics,
    reading,
    sources,
)
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.api.upload_slots import UploadSlots
from ingestion_pipeline.api.webapp import pages as web_pages
from ingestion_pipeline.core import login_failures

# Routes that stream their body as they parse it (paced and bounded there); every other body is read whole first.
STREAMING_UPLOADS = {("POST", "/v1/ingest"), ("POST", "/v1/metrics/uploads")}


def create_app(services: ApiServices, *, close_on_shutdown: bool = False) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        services.close_lowered()
        app.state.file_events.close()
        app.state.login_guard.close()
        if close_on_shutdown:
            services.db.close()

    app = FastAPI(
        title="ingestion_pipeline",
        version="1",
        summary="Upload documents and metric exports, follow their runs, search with citations.",
        lifespan=lifespan,
        responses=errors.COMMON_ERRORS,
        docs_url=None,  # docs_pages.py serves them without a CDN
        redoc_url=None,
    )
    app.state.services = services
    app.state.file_events = FileEvents(getattr(services.db, "url", None))
    app.state.upload_slots = UploadSlots(services.api.max_inflight_uploads)
    api = services.api
    app.state.search_slots = TenantReadSlots(services.api.searches_per_tenant)
    app.state.login_guard = LoginGuard(concurrent=api.max_concurrent_logins,
                                       per_address=api.login_failures_per_address,
                                       per_pair=api.login_failures_per_account,
                                       window_seconds=api.login_window_seconds,
                                       key=login_failures.derive_key(api.jwt_secret) if api.jwt_secret else None)
    errors.install(app)
    app.add_middleware(RefuseOverShare, slots=app.state.search_slots, secret=api.jwt_secret,
                       auth_enabled=api.auth_enabled, session_key=web_session.signing_key(api))
    app.add_middleware(BodyBounds, streaming=STREAMING_UPLOADS, idle_seconds=services.api.upload_idle_seconds,
                       min_bytes_per_second=services.api.upload_min_bytes_per_second)
    for module in (health, auth, ingest, files, documents, reading, evaluations, sources, metrics):
        app.include_router(module.router)
    app.include_router(files.deprecated_router)
    docs_pages.install(app)
    web_pages.install(app)
    return app
