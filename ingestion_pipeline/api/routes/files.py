"""The ledger's files of a tenant's document work (one row per file per submission).

``/v1/files`` is the path; ``/v1/ingestion-runs`` is its old name, kept (marked deprecated in the OpenAPI
document) for clients written before "run" came to mean only a Dagster run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from ingestion_pipeline.api.errors import not_found
from ingestion_pipeline.api.paging import PageParams
from ingestion_pipeline.api.schemas import MAX_ID, FileOut, Page
from ingestion_pipeline.api.security import Caller, Services
from ingestion_pipeline.documents import file_ledger

router = APIRouter(prefix="/v1/files", tags=["files"])
deprecated_router = APIRouter(prefix="/v1/ingestion-runs", tags=["files"], deprecated=True)
FileStatus = Literal["queued", "running", "succeeded", "failed", "dead_letter", "canceled"]
FileId = Annotated[int, Path(ge=1, le=MAX_ID)]


def _list(who: Caller, services: Services, paging: PageParams,
          status: Annotated[FileStatus | None, Query()] = None) -> dict:
    with services.db.connection() as conn:
        rows = file_ledger.list_files(conn, tenant_id=who.tenant_id, status=status, limit=paging.limit,
                                      offset=paging.offset)
        total = file_ledger.count_files(conn, tenant_id=who.tenant_id, status=status)
    return paging.envelope(rows, total)


def _get(file_id: int, who: Caller, services: Services) -> dict:
    with services.db.connection() as conn:
        row = file_ledger.get_file(conn, file_id, tenant_id=who.tenant_id)
    if row is None:
        raise not_found("file")
    return row


@router.get("", response_model=Page[FileOut])
def list_files(who: Caller, services: Services, paging: PageParams,
               status: Annotated[FileStatus | None, Query()] = None) -> dict:
    """Newest first."""
    return _list(who, services, paging, status)


@router.get("/{file_id}", response_model=FileOut)
def get_file(file_id: FileId, who: Caller, services: Services) -> dict:
    """Status, timings, config, stats, the error and the Dagster run id of one file."""
    return _get(file_id, who, services)


@deprecated_router.get("", response_model=Page[FileOut])
def list_runs(who: Caller, services: Services, paging: PageParams,
              status: Annotated[FileStatus | None, Query()] = None) -> dict:
    """Deprecated: ``GET /v1/files``."""
    return _list(who, services, paging, status)


@deprecated_router.get("/{run_id}", response_model=FileOut)
def get_run(run_id: FileId, who: Caller, services: Services) -> dict:
    """Deprecated: ``GET /v1/files/{file_id}``."""
    return _get(run_id, who, services)
