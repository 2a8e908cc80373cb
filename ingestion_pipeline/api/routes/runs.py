"""The ledger rows of a tenant's document work (one per file per submission)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from ingestion_pipeline.api.errors import not_found
from ingestion_pipeline.api.paging import PageParams
from ingestion_pipeline.api.schemas import MAX_ID, Page, RunOut
from ingestion_pipeline.api.security import Caller, Services
from ingestion_pipeline.documents import runs

router = APIRouter(prefix="/v1/ingestion-runs", tags=["runs"])
RunStatus = Literal["queued", "running", "succeeded", "failed", "dead_letter", "canceled"]


@router.get("", response_model=Page[RunOut])
def list_runs(who: Caller, services: Services, paging: PageParams,
              status: Annotated[RunStatus | None, Query()] = None) -> dict:
    with services.db.connection() as conn:
        rows = runs.list_runs(conn, tenant_id=who.tenant_id, status=status, limit=paging.limit,
                              offset=paging.offset)
        total = runs.count_runs(conn, tenant_id=who.tenant_id, status=status)
    return paging.envelope(rows, total)


@router.get("/{run_id}", response_model=RunOut)
def get_run(run_id: Annotated[int, Path(ge=1, le=MAX_ID)], who: Caller, services: Services) -> dict:
    """Status, timings, config, stats, the error and the Dagster run id of one ledger row."""
    with services.db.connection() as conn:
        row = runs.get_run(conn, run_id, tenant_id=who.tenant_id)
    if row is None:
        raise not_found("ingestion run")
    return row
