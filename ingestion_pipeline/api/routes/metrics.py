"""Metric exports: upload (streamed multipart), status, row errors, and completion events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ingestion_pipeline.api.errors import ApiError, found, not_found
from ingestion_pipeline.api.multipart import openapi_form
from ingestion_pipeline.api.paging import PageParams
from ingestion_pipeline.api.schemas import MAX_ID, EventOut, MetricRowErrorOut, MetricSubmitOut, MetricUploadOut, Page
from ingestion_pipeline.api.security import Caller, Services
from ingestion_pipeline.api.upload_slots import UPLOAD_BOUNDS_RESPONSES, receive_upload
from ingestion_pipeline.metrics import uploads
from ingestion_pipeline.metrics.formats import METRIC_FORMATS, PLATFORMS

router = APIRouter(prefix="/v1", tags=["metrics"])
ISO_TIME = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?$"


def _utc(text: str) -> datetime:
    """An ISO 8601 date or time (``ISO_TIME``) as an aware datetime; without a zone, UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:  # matches the pattern but is no date (2026-13-40)
        raise ApiError(400, "invalid_request", f"since is not a date or time: {text!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
UploadId = Annotated[int, Path(ge=1, le=MAX_ID)]

_MULTIPART_BODY = openapi_form(METRIC_FORMATS, platform={"type": "string", "enum": list(PLATFORMS)},
                               force_partial={"type": "boolean"}, client_id={"type": "string", "maxLength": 200})


@router.post("/metrics/uploads", status_code=202, response_model=MetricSubmitOut, openapi_extra=_MULTIPART_BODY,
             responses={200: {"model": MetricSubmitOut, "description": "the same file was uploaded before"},
                        202: {"description": "pending", "links": {
                            "GetUpload": {"operationId": "get_upload_v1_metrics_uploads__upload_id__get",
                                          "parameters": {"upload_id": "$response.body#/upload_id"}},
                            "GetUploadErrors": {
                                "operationId": "upload_errors_v1_metrics_uploads__upload_id__errors_get",
                                "parameters": {"upload_id": "$response.body#/upload_id"}}}},
                        413: {"description": "over the size limit"}, 415: {"description": "type not allowed"},
                        **UPLOAD_BOUNDS_RESPONSES})
async def submit(request: Request, who: Caller, services: Services) -> JSONResponse:
    """Upload a CSV/JSON export (multipart ``file``; optional ``platform`` (default: detected from the
    columns), ``force_partial``, ``client_id``)."""
    max_bytes = services.settings.metrics.max_bytes
    store = services.metric_store

    def open_incoming(filename: str):
        try:
            uploads.check_metric_file(filename, None)
        except ValueError as exc:
            raise ApiError(415, "unsupported_type", str(exc)) from exc
        return store.incoming(who.tenant_id, max_bytes=max_bytes)

    form = await receive_upload(request, who, services.api, open_incoming=open_incoming, max_bytes=max_bytes,
                                text_fields=("platform", "force_partial", "client_id"))
    platform = form.fields.get("platform") or None  # None: detected from the file's columns
    force = form.fields.get("force_partial", "false").strip().lower()
    try:
        if force not in ("true", "false", "1", "0"):
            raise ValueError(f"force_partial must be true or false, got {force!r}")
        result = await run_in_threadpool(
            uploads.submit_stored_metric_file, services.db, store, form.stored, workspace_id=who.tenant_id,
            platform=platform, filename=form.filename, client_id=form.fields.get("client_id"),
            force_partial=force in ("true", "1"), valid_threshold=services.settings.metrics.valid_threshold,
        )
    except ValueError as exc:  # e.g. an unknown platform: nothing recorded, and the bytes go too
        if form.stored.created:
            store.release(form.stored.path)
        raise ApiError(400, "invalid_request", str(exc)) from exc
    if result.status == "rejected":  # the platform could not be told from the columns
        raise ApiError(400, "unknown_layout", result.reason or "unknown layout")
    body = MetricSubmitOut.model_validate(result.as_dict()).model_dump(mode="json", exclude_none=True)
    return JSONResponse(body, status_code=202 if result.status == "pending" else 200)


@router.get("/metrics/uploads", response_model=Page[MetricUploadOut])
def list_uploads(who: Caller, services: Services, paging: PageParams) -> dict:
    with services.db.connection() as conn:
        rows = uploads.list_uploads(conn, workspace_id=who.tenant_id, limit=paging.limit, offset=paging.offset)
        total = uploads.count_uploads(conn, workspace_id=who.tenant_id)
    return paging.envelope(rows, total)


@router.get("/metrics/uploads/{upload_id}", response_model=MetricUploadOut)
def get_upload(upload_id: UploadId, who: Caller, services: Services) -> dict:
    """Status, row counts and the reason of a failed or partial upload."""
    with services.db.connection() as conn:
        return found(uploads.get_upload(conn, upload_id, workspace_id=who.tenant_id), "metric upload")


@router.get("/metrics/uploads/{upload_id}/errors", response_model=Page[MetricRowErrorOut])
def upload_errors(upload_id: UploadId, who: Caller, services: Services, paging: PageParams) -> dict:
    """The rows that did not validate, with what is wrong with each."""
    with services.db.connection() as conn:
        if uploads.get_upload(conn, upload_id, workspace_id=who.tenant_id) is None:
            raise not_found("metric upload")
        rows = uploads.upload_errors(conn, upload_id, workspace_id=who.tenant_id, limit=paging.limit,
                                     offset=paging.offset)
        total = uploads.count_upload_errors(conn, upload_id)
    return paging.envelope(rows, total)


@router.get("/events", response_model=Page[EventOut])
def events(who: Caller, services: Services, paging: PageParams,
           since: Annotated[str | None, Query(pattern=ISO_TIME, description=(
               "events at or after this time, oldest first: ISO 8601 (2026-11-28, 2026-11-28T10:00:00Z); a "
               "time without a zone is UTC"))] = None,
           ) -> dict:
    """Completion events of the tenant's metric uploads (newest first, or oldest first from ``since``)."""
    return paging.of(services.db, uploads.list_events, uploads.count_events, workspace_id=who.tenant_id,
                     since=_utc(since) if since else None)
