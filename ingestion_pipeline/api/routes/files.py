"""The ledger's files of a tenant's document work (one row per file per submission).

``/v1/files`` is the path; ``/v1/ingestion-runs`` is its old name, kept (marked deprecated in the OpenAPI
document) for clients written before "run" came to mean only a Dagster run.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from ingestion_pipeline.api.errors import ApiError, found
from ingestion_pipeline.api.file_events import FileEvents
from ingestion_pipeline.api.paging import PageParams
from ingestion_pipeline.api.schemas import MAX_ID, BacklogOut, FileOut, Page
from ingestion_pipeline.api.security import Admin, Caller, Services, still_signed_in
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.documents.backlog import backlog

router = APIRouter(prefix="/v1/files", tags=["files"])
deprecated_router = APIRouter(prefix="/v1/ingestion-runs", tags=["files"], deprecated=True)
FileStatus = Literal["queued", "running", "succeeded", "failed", "dead_letter", "canceled"]
FileId = Annotated[int, Path(ge=1, le=MAX_ID)]
KEEPALIVE_SECONDS = 15.0
_QUIET = object()  # no move within KEEPALIVE_SECONDS


@router.get("", response_model=Page[FileOut])
def list_files(who: Caller, services: Services, paging: PageParams,
               status: Annotated[FileStatus | None, Query()] = None) -> dict:
    """Newest first."""
    return paging.of(services.db, file_ledger.list_files, file_ledger.count_files, tenant_id=who.tenant_id,
                     status=status)


@router.get("/backlog", response_model=BacklogOut)
def file_backlog(who: Caller, services: Services) -> dict:
    """The tenant's files queued and running, per batch, with when each should be done (at the rate its files
    finished lately)."""
    with services.db.connection() as conn:
        [tenant] = backlog(conn, tenant_id=who.tenant_id)
    return tenant.as_dict()


@router.get("/events", response_class=StreamingResponse, responses={
    200: {"content": {"text/event-stream": {}}, "description": "`event: file`, data: the file as `GET /v1/files/"
          "{file_id}` answers; `event: resync`: moves may have been missed, list the files again"}})
async def file_events(request: Request, who: Caller, services: Services) -> StreamingResponse:
    """The tenant's files as they move (queued, running with its step's progress, succeeded, failed), pushed as
    server-sent events the moment each move commits (``api/file_events.py``); each connection starts with
    ``resync``. A comment every ``KEEPALIVE_SECONDS`` keeps proxies from closing a quiet stream; as often, the token
    or session is checked again: expired, signed out of or disabled, the stream ends."""
    events: FileEvents = request.app.state.file_events
    if events.url is None:
        raise ApiError(503, "events_unavailable", "live file events need the database URL")

    def read(file_id: int) -> dict | None:
        with services.db.connection() as conn:
            row = file_ledger.get_file(conn, file_id, tenant_id=who.tenant_id)
        return None if row is None else FileOut.model_validate(row).model_dump(mode="json")

    async def stream():
        queue = events.subscribe(who.tenant_id)  # here, not before: a response never sent subscribes nothing
        checked = time.monotonic()
        try:
            # every connection, a reconnection too, starts by reading the list again: what moved while it was not
            # connected is not lost
            yield "retry: 2000\n\nevent: resync\ndata: {}\n\n"
            while True:
                try:
                    file_id = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    file_id = _QUIET
                if time.monotonic() - checked >= KEEPALIVE_SECONDS:  # signed out, expired, disabled: it ends
                    if not await run_in_threadpool(still_signed_in, request):
                        return
                    checked = time.monotonic()
                if file_id is _QUIET:
                    yield ": keepalive\n\n"
                elif file_id is None:
                    yield "event: resync\ndata: {}\n\n"
                elif (body := await run_in_threadpool(read, file_id)) is not None:
                    yield f"event: file\ndata: {json.dumps(body)}\n\n"
        finally:
            events.unsubscribe(who.tenant_id, queue)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/{file_id}", response_model=FileOut)
def get_file(file_id: FileId, who: Caller, services: Services) -> dict:
    """Status, timings, config, stats, the error and the Dagster run id of one file."""
    with services.db.connection() as conn:
        return found(file_ledger.get_file(conn, file_id, tenant_id=who.tenant_id), "file")


@router.post("/{file_id}/retry", response_model=FileOut, responses={
    409: {"description": "the file is not failed, dead-lettered or canceled: nothing to replay"}})
def retry_file(file_id: FileId, who: Admin, services: Services) -> dict:
    """Replay a failed, dead-lettered or canceled file as a new attempt with a fresh retry budget (admin); the
    sensors or ``process`` run it, as they run an upload."""
    with services.db.transaction() as conn:
        row, replayed = found(file_ledger.retry(conn, file_id, tenant_id=who.tenant_id, actor=f"api:{who.user_id}"),
                              "file")
    if not replayed:
        raise ApiError(409, "not_replayable", f"the file is {row['status']}: only failed, dead-lettered or canceled "
                                              "files are replayed")
    services.launch_soon()
    return row


# the old paths answer with the same handlers
deprecated_router.add_api_route("", list_files, response_model=Page[FileOut], methods=["GET"],
                                summary="List files (deprecated path: GET /v1/files)")
deprecated_router.add_api_route("/{file_id}", get_file, response_model=FileOut, methods=["GET"],
                                summary="Get a file (deprecated path: GET /v1/files/{file_id})")
