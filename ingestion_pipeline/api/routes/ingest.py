"""Document uploads: streamed multipart (``/v1/ingest``) and presigned S3 PUTs (``/v1/uploads``)."""

from __future__ import annotations

import json
import logging
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ingestion_pipeline.api.errors import ApiError, not_found
from ingestion_pipeline.api.multipart import openapi_form
from ingestion_pipeline.api.schemas import PresignIn, PresignOut, SubmitOut
from ingestion_pipeline.api.security import Caller, Services
from ingestion_pipeline.api.upload_slots import UPLOAD_BOUNDS_RESPONSES, receive_upload
from ingestion_pipeline.core.access_tokens import Principal
from ingestion_pipeline.core.file_types import BadFileName, UnsupportedFileType
from ingestion_pipeline.documents import presigned
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.documents.intake import (
    KEY_PATTERN,
    QUEUED,
    SKIPPED,
    SubmitResult,
    check_document_name,
    submit_stored,
)

router = APIRouter(prefix="/v1", tags=["documents"])
_log = logging.getLogger("ingestion_pipeline.api")

_MULTIPART_BODY = openapi_form(DOCUMENT_TYPES, title={"type": "string", "maxLength": 500}, key={
    "type": "string", "maxLength": 200, "pattern": KEY_PATTERN,
    "description": "a stable key: a later upload under it is a new version of the same document (no '..')"})
_UPLOAD_ERRORS = {413: {"description": "over the size limit"}, 415: {"description": "type not allowed"}}
_STREAMED_UPLOAD_ERRORS = {**_UPLOAD_ERRORS, **UPLOAD_BOUNDS_RESPONSES}


def submit_response(result: SubmitResult) -> JSONResponse:
    body = SubmitOut.model_validate(result.as_dict()).model_dump(mode="json", exclude_none=True)
    return JSONResponse(body, status_code=200 if result.status == SKIPPED else 202)


def log_submitted(who: Principal, result: SubmitResult, via: str) -> None:
    _log.info(json.dumps({
        "event": "ingest_job_submitted", "via": via, "tenant_id": who.tenant_id, "user_id": who.user_id,
        "file_id": result.file_id, "run_id": result.file_id, "doc_id": result.doc_id, "dedup": result.status,
        "filename": result.filename,
        "size_bytes": result.size_bytes, "sha256": result.sha256, "source_uri": result.source_uri,
    }))


_SUBMIT_LINKS = {
    "GetFile": {"operationId": "get_file_v1_files__file_id__get",
                "parameters": {"file_id": "$response.body#/file_id"}},
    "GetDocument": {"operationId": "document_v1_documents__doc_id__get",
                    "parameters": {"doc_id": "$response.body#/doc_id"}},
}


@router.post("/ingest", status_code=202, response_model=SubmitOut, openapi_extra=_MULTIPART_BODY,
             responses={200: {"model": SubmitOut, "description": "identical content is already active"},
                        202: {"description": "queued", "links": _SUBMIT_LINKS}, **_STREAMED_UPLOAD_ERRORS})
async def ingest(request: Request, who: Caller, services: Services) -> JSONResponse:
    """Upload one document (multipart ``file``, optional ``title`` and ``key``), streamed to the store with its
    SHA-256, and queue it for the pipeline."""
    max_bytes = services.settings.upload.max_bytes
    store = services.document_store

    def open_incoming(filename: str):
        try:
            check_document_name(filename)
        except BadFileName as exc:
            raise ApiError(400, "invalid_filename", str(exc)) from exc
        except UnsupportedFileType as exc:
            raise ApiError(415, "unsupported_type", str(exc)) from exc
        return store.incoming(who.tenant_id, max_bytes=max_bytes)

    form = await receive_upload(request, who, services.api, open_incoming=open_incoming, max_bytes=max_bytes,
                                text_fields=("title", "key"))
    try:
        fingerprint = await run_in_threadpool(lambda: services.fingerprint)
        result = await run_in_threadpool(
            submit_stored, services.db, store, form.stored, tenant_id=who.tenant_id, filename=form.filename,
            fingerprint=fingerprint, title=form.fields.get("title"), key=form.fields.get("key"),
        )
    except ValueError as exc:  # a bad key: the stored copy is already released
        raise ApiError(400, "invalid_request", str(exc)) from exc
    log_submitted(who, result, "ingest")
    if result.status == QUEUED:
        services.launch_soon()
    return submit_response(result)


@router.post("/uploads", response_model=PresignOut, status_code=201, responses={
    201: {"description": "a presigned PUT", "links": {"CompleteUpload": {
        "operationId": "complete_upload_v1_uploads__upload_id__complete_post",
        "parameters": {"upload_id": "$response.body#/upload_id"}}}},
    **_UPLOAD_ERRORS})
def create_upload(body: PresignIn, who: Caller, services: Services) -> dict:
    """A presigned S3 PUT for one document (valid 15 minutes, for the declared size and type)."""
    try:
        with services.db.connection() as conn:
            upload = presigned.create(
                conn, services.upload_s3_client(), services.api, tenant_id=who.tenant_id, user_id=who.user_id,
                filename=body.filename, size_bytes=body.size_bytes, content_type=body.content_type,
                max_bytes=services.settings.upload.max_bytes, title=body.title, key=body.key, sha256=body.sha256,
            )
    except presigned.UploadRefused as exc:
        raise refused(exc) from exc
    return {"upload_id": upload.upload_id, "url": upload.url, "method": upload.method, "headers": upload.headers,
            "expires_at": upload.expires_at}


@router.post("/uploads/{upload_id}/complete", status_code=202, response_model=SubmitOut,
             responses={200: {"model": SubmitOut}, 409: {"description": "nothing uploaded yet, or expired"},
                        **_UPLOAD_ERRORS})
def complete_upload(upload_id: Annotated[str, Path(max_length=64)], who: Caller, services: Services) -> JSONResponse:
    """Fetch what was PUT, check it against the declaration, and queue it like ``/v1/ingest``."""
    try:
        result = presigned.complete(
            services.db, services.document_store, services.upload_s3_client(), upload_id=upload_id,
            tenant_id=who.tenant_id, fingerprint=services.fingerprint, max_bytes=services.settings.upload.max_bytes,
        )
    except LookupError as exc:
        raise not_found("upload") from exc
    except presigned.UploadRefused as exc:
        raise refused(exc) from exc
    log_submitted(who, result, "presigned")
    if result.status == QUEUED:
        services.launch_soon()
    return submit_response(result)


def refused(exc: presigned.UploadRefused) -> ApiError:
    status = {"unsupported_type": 415, "too_large": 413, "not_uploaded": 409, "expired": 409, "rejected": 409,
              "not_configured": 501}.get(exc.code, 400)
    return ApiError(status, exc.code, str(exc))
