"""A tenant's documents, their versions, deactivation, and search with citations."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from ingestion_pipeline.api.errors import ApiError, not_found
from ingestion_pipeline.api.paging import PageParams
from ingestion_pipeline.api.schemas import MAX_ID, DeactivatedOut, DocumentDetail, DocumentOut, Page, SearchOut
from ingestion_pipeline.api.security import Admin, Caller, Services
from ingestion_pipeline.documents.listing import count_documents, get_document, list_documents
from ingestion_pipeline.documents.promotion import deactivate_document
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.documents.search_filters import FilterTooBroad, search_filter

router = APIRouter(prefix="/v1", tags=["documents"])
DocId = Annotated[int, Path(ge=1, le=MAX_ID)]


@router.get("/documents", response_model=Page[DocumentOut])
def documents(
    who: Caller, services: Services, paging: PageParams,
    search: Annotated[str | None, Query(max_length=200, description="in title, file name or source")] = None,
    status: Annotated[Literal["active", "inactive"] | None, Query()] = None,
) -> dict:
    """Documents with at least one version; ``status`` narrows to those served now or no longer served."""
    which = status or "versioned"
    with services.db.connection() as conn:
        rows = list_documents(conn, who.tenant_id, status=which, search=search, limit=paging.limit,
                              offset=paging.offset)
        total = count_documents(conn, who.tenant_id, status=which, search=search)
    return paging.envelope(rows, total)


@router.get("/documents/{doc_id}", response_model=DocumentDetail)
def document(doc_id: DocId, who: Caller, services: Services) -> dict:
    with services.db.connection() as conn:
        doc = get_document(conn, who.tenant_id, doc_id)
    if doc is None:
        raise not_found("document")
    return doc


def _deactivate(doc_id: int, who, services) -> dict:
    with services.db.connection() as conn:
        try:
            version_id = deactivate_document(conn, who.tenant_id, doc_id)
        except LookupError as exc:
            raise not_found("document") from exc
    return {"doc_id": doc_id, "deactivated_version_id": version_id, "is_active": False}


@router.post("/documents/{doc_id}/deactivate", response_model=DeactivatedOut)
def deactivate(doc_id: DocId, who: Admin, services: Services) -> dict:
    """Stop serving the document (its versions stay; a new upload under its key activates again)."""
    return _deactivate(doc_id, who, services)


@router.delete("/documents/{doc_id}", response_model=DeactivatedOut)
def delete(doc_id: DocId, who: Admin, services: Services) -> dict:
    """The same as deactivate: no row is deleted."""
    return _deactivate(doc_id, who, services)


@router.get("/search", response_model=SearchOut, tags=["search"], responses={
    400: {"description": "a filter admitting too many chunks (`filter_too_broad`), or an empty date range"},
    429: {"description": "the tenant already runs and queues its share of searches (Retry-After)"}})
async def search(
    request: Request, who: Caller, services: Services,
    q: Annotated[str, Query(min_length=1, max_length=1000, pattern=r"\S")],
    k: Annotated[int, Query(ge=1, le=50)] = 5,
    context: Annotated[int, Query(ge=0, le=3, description="chunks before and after each hit to include")] = 0,
    doc_id: Annotated[list[Annotated[int, Field(ge=1, le=MAX_ID)]] | None,
                      Query(max_length=100, description="only these documents")] = None,
    source: Annotated[str | None, Query(max_length=500, description="only documents whose source URI starts so")
                      ] = None,
    file_type: Annotated[list[Annotated[str, Field(pattern=r"^\.?[A-Za-z0-9]{1,10}$")]] | None,
                         Query(alias="type", max_length=20, description="only these file types: pdf, docx")] = None,
    language: Annotated[list[Annotated[str, Field(pattern=r"^[a-z_]{1,40}$")]] | None,
                        Query(max_length=20, description="only chunks in these languages: english, french")] = None,
    since: Annotated[datetime | None, Query(description="only versions served from then on")] = None,
    until: Annotated[datetime | None, Query(description="only versions served before then")] = None,
) -> dict:
    """Hybrid search (vectors + full text) over the tenant's active versions; each hit with its citation.
    A tenant runs at most its share of searches at once (``api/read_slots.py``). Filters narrow it to documents, a
    source, file types, languages or a date range, the admitted chunks ranked exactly
    (``documents/search_filters.py``); a filter admitting too many is refused (400 ``filter_too_broad``)."""
    try:
        only = search_filter(doc_ids=doc_id or (), source=source, file_types=file_type or (),
                             languages=language or (), since=since, until=until)
    except ValueError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from exc
    slots = request.app.state.search_slots  # over its share and queue: refused before routing (RefuseOverShare)

    lowered = slots.busy(who.tenant_id)  # it will wait for its tenant's share, or did lately: it runs lowered

    def run() -> list:
        with slots.hold(who.tenant_id):
            embedders = services.query_embedders
            vector, tokens = services.query_embedding(q, lowered=lowered)
            with (services.lowered_db if lowered else services.db).connection() as conn:
                return hybrid_search(conn, tenant_id=who.tenant_id, query=q, query_vector=vector, k=k,
                                     model=embedders.model, neighbours=context,
                                     other_models=embedders.for_query(q), query_tokens=tokens, only=only)

    try:
        if lowered:
            hits = await asyncio.get_running_loop().run_in_executor(slots.lower_priority, run)
        else:
            hits = await run_in_threadpool(run)
    except FilterTooBroad as exc:
        raise ApiError(400, "filter_too_broad", str(exc)) from exc
    return {"query": q, "hits": [hit_out(h) for h in hits]}


def hit_out(h) -> dict:
    """A search hit as the API answers it (``SearchOut``'s hits)."""
    return {"chunk_id": h.chunk_id, "score": h.score, "citation": h.citation(), "vector_rank": h.vector_rank,
            "text_rank": h.text_rank, "navigational": h.navigational, "also_in": h.also_in,
            "context_before": h.context_before, "context_after": h.context_after,
            "source": {"doc_id": h.doc_id, "title": h.title, "filename": h.filename, "source_uri": h.source_uri,
                       "version_number": h.version_number, "page_start": h.page_start, "page_end": h.page_end,
                       "section_path": h.section_path, "text": h.text, "ocr": h.ocr}}
