"""A tenant's S3 sources: add, list, pause, resume, sync now, remove (admin only except listing)."""

from __future__ import annotations

import json
import logging
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Path

from ingestion_pipeline.api.errors import ApiError, not_found
from ingestion_pipeline.api.paging import PageParams
from ingestion_pipeline.api.schemas import MAX_ID, Page, SourceIn, SourceOut, SyncStarted
from ingestion_pipeline.api.security import Admin, Caller, Services
from ingestion_pipeline.sources import registry
from ingestion_pipeline.sources.locations import LocationNotBound
from ingestion_pipeline.sources.sync_pass import sync_sources

router = APIRouter(prefix="/v1/sources", tags=["sources"])
_log = logging.getLogger("ingestion_pipeline.api")
SourceId = Annotated[int, Path(ge=1, le=MAX_ID)]


def _status(conn, tenant_id: str, source_id: int) -> dict:
    for row in registry.source_status(conn, tenant_id=tenant_id):
        if row["source_id"] == source_id:
            return row
    raise not_found("source")


def _allowed_endpoint(endpoint_url: str | None, allowed: tuple[str, ...]) -> str | None:
    """A tenant may name an endpoint only from INGESTION_ALLOWED_S3_ENDPOINTS (never an internal address)."""
    if endpoint_url is None:
        return None
    endpoint = endpoint_url.strip().rstrip("/")
    if endpoint not in allowed:
        raise ApiError(400, "endpoint_not_allowed",
                       "this endpoint is not in the server's INGESTION_ALLOWED_S3_ENDPOINTS"
                       if allowed else "custom S3 endpoints are off (INGESTION_ALLOWED_S3_ENDPOINTS is not set)")
    return endpoint


def _source_links() -> dict:
    link = {"parameters": {"source_id": "$response.body#/source_id"}}
    return {name: {"operationId": op, **link} for name, op in (
        ("GetSource", "get_source_v1_sources__source_id__get"),
        ("PauseSource", "pause_v1_sources__source_id__pause_post"),
        ("ResumeSource", "resume_v1_sources__source_id__resume_post"),
        ("SyncSource", "sync_v1_sources__source_id__sync_post"),
        ("RemoveSource", "remove_v1_sources__source_id__delete"))}


@router.post("", response_model=SourceOut, status_code=201,
             responses={201: {"description": "the source", "links": _source_links()},
                        403: {"description": "not an admin, or the location is not bound to the tenant "
                                             "(`location_not_bound`)"},
                        409: {"description": "already exists"}})
def add_source(body: SourceIn, who: Admin, services: Services) -> dict:
    """Keep ``s3://bucket/prefix/`` in sync with the tenant's knowledge base (or metrics, with a platform)."""
    endpoint = _allowed_endpoint(body.endpoint_url, services.api.allowed_s3_endpoints)
    bucket, prefix = registry.parse_s3_uri(body.uri)
    with services.db.connection() as conn:
        # names are global: the tenant's id in front, and never one another tenant holds
        name = registry.name_for_tenant(conn, who.tenant_id, body.name or registry.default_source_name(bucket, prefix))
        try:
            source = registry.add_source(conn, body.uri, tenant_id=who.tenant_id, name=name, endpoint_url=endpoint,
                                         kind=body.kind, platform=body.platform, bound_by=None)
        except LocationNotBound as exc:
            raise ApiError(403, "location_not_bound", str(exc)) from exc
        except ValueError as exc:
            if "already exists" in str(exc):
                raise ApiError(409, "conflict", f"the tenant already has a source {name!r} or for {body.uri}") from exc
            raise
        return _status(conn, who.tenant_id, source.source_id)


@router.get("", response_model=Page[SourceOut])
def list_sources(who: Caller, services: Services, paging: PageParams) -> dict:
    with services.db.connection() as conn:
        rows = registry.source_status(conn, tenant_id=who.tenant_id)
    return paging.envelope(rows[paging.offset:paging.offset + paging.limit], len(rows))


@router.get("/{source_id}", response_model=SourceOut)
def get_source(source_id: SourceId, who: Caller, services: Services) -> dict:
    with services.db.connection() as conn:
        return _status(conn, who.tenant_id, source_id)


def _set_paused(source_id: int, who, services, paused: bool) -> dict:
    with services.db.connection() as conn:
        try:
            source = registry.get_tenant_source(conn, source_id, tenant_id=who.tenant_id)
        except LookupError as exc:
            raise not_found("source") from exc
        registry.set_paused(conn, source.name, paused)
        return _status(conn, who.tenant_id, source_id)


@router.post("/{source_id}/pause", response_model=SourceOut)
def pause(source_id: SourceId, who: Admin, services: Services) -> dict:
    return _set_paused(source_id, who, services, True)


@router.post("/{source_id}/resume", response_model=SourceOut)
def resume(source_id: SourceId, who: Admin, services: Services) -> dict:
    return _set_paused(source_id, who, services, False)


@router.post("/{source_id}/sync", response_model=SyncStarted, status_code=202,
             responses={409: {"description": "the source is paused"}})
def sync(source_id: SourceId, who: Admin, services: Services, background: BackgroundTasks) -> dict:
    """Start one bounded listing step now (the per-tick page budget); what changed is queued for the
    sensors. How it ended shows in ``GET /v1/sources/{id}`` (``last_sync_at``, ``last_sync_error``)."""
    with services.db.connection() as conn:
        try:
            source = registry.get_tenant_source(conn, source_id, tenant_id=who.tenant_id)
        except LookupError as exc:
            raise not_found("source") from exc
    if source.paused:
        raise ApiError(409, "paused", "the source is paused; resume it first")
    if not services.begin_sync(source.source_id):
        return {"source_id": source_id, "status": "already_running",
                "detail": "a listing of this source is already under way; see last_sync_at / last_sync_error"}
    background.add_task(_sync_now, services, source.source_id, source.name)
    return {"source_id": source_id, "status": "started",
            "detail": "listing now; see last_sync_at / last_sync_error and the object counts of the source"}


def _sync_now(services, source_id: int, name: str) -> None:
    try:
        with services.sync_slots:  # waits here holding no connection
            try:
                reports = sync_sources(services.db, services.settings, services.s3_client, services.metric_store,
                                       names=[name])
                error = None
                _log.info(json.dumps({"event": "source_synced", "source_id": source_id,
                                      **(reports[0].as_dict() if reports else {})}))
            except Exception as exc:  # noqa: BLE001 - an S3 failure is the sync's outcome, kept on the source
                error = f"{type(exc).__name__}: {exc}"[:1000]
                _log.warning(json.dumps({"event": "source_sync_failed", "source_id": source_id, "error": error}))
            with services.db.connection() as conn:
                registry.record_sync_outcome(conn, source_id, error)
    finally:
        services.end_sync(source_id)


@router.delete("/{source_id}", response_model=SourceOut)
def remove(source_id: SourceId, who: Admin, services: Services) -> dict:
    """Stop syncing; documents already ingested stay as they are."""
    with services.db.connection() as conn:
        try:
            source = registry.get_tenant_source(conn, source_id, tenant_id=who.tenant_id)
        except LookupError as exc:
            raise not_found("source") from exc
        row = _status(conn, who.tenant_id, source_id)
        registry.remove_source(conn, source.name)
    return row
