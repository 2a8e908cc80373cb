"""A document as its readers see it: a version's chunks in order, its pages' images, where a chunk lies on its
pages (the web app's inspector, and a citation that opens the page)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response

from ingestion_pipeline.api.errors import found, not_found
from ingestion_pipeline.api.schemas import MAX_ID, ChunkBoxesOut, PageLayoutOut, VersionChunksOut
from ingestion_pipeline.api.security import Caller, Services
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.core.access_tokens import Principal
from ingestion_pipeline.documents import office_pages, page_views, reading

router = APIRouter(prefix="/v1", tags=["documents"])
DocId = Annotated[int, Path(ge=1, le=MAX_ID)]
Version = Annotated[int | None, Query(ge=1, le=MAX_ID, description="a version number; default: the active one")]
# a page's image is the bytes of one version's file, which never change: cached by the browser for a day
IMAGE_CACHE = "private, max-age=86400"
# pages either side of where a laid-out file's chunk should be (its place in the file), looked at first
LAID_OUT_REACH = 3
LAID_OUT_SCAN_PAGES = 300


@router.get("/documents/{doc_id}/chunks", response_model=VersionChunksOut)
def chunks(doc_id: DocId, who: Caller, services: Services, version: Version = None) -> dict:
    """A version's chunks in reading order (section path, pages, language, tokens, whether OCR read it), which of
    its pages have an image (``pages/{page}/image``) and which were read by OCR."""
    with services.db.connection() as conn:
        found_version = found(reading.version_to_read(conn, who.tenant_id, doc_id, version), "document version")
        rows = reading.version_chunks(conn, who.tenant_id, found_version["version_id"])
        ocr_pages = reading.ocr_pages(conn, who.tenant_id, found_version["version_id"])
    imaged, laid_out = _page_images(services.document_store, who.tenant_id, found_version)
    return {**found_version, "page_images": imaged, "laid_out": laid_out, "ocr_pages": ocr_pages, "chunks": rows}


def _page_images(store, tenant_id: str, version: dict) -> tuple[int, bool]:
    """How many pages of the version have images, and whether they are a layout of another format (a DOCX laid
    out by LibreOffice: its chunks' page numbers are not these pages')."""
    manifest = store.get_view(tenant_id, version["content_hash"], office_pages.MANIFEST)
    if manifest is not None:
        try:
            return max(0, int(json.loads(manifest)["pages"])), True
        except (ValueError, KeyError, TypeError):
            return 0, True
    if version["page_count"] and store.get_view(tenant_id, version["content_hash"], page_views.layout_name(1)):
        return version["page_count"], False
    return 0, False


def _page_view(who: Principal, services: ApiServices, doc_id: int, version: int | None, name: str,
               what: str) -> tuple[dict, bytes]:
    """The tenant's document version (its active one when ``version`` is None) and its view ``name``, kept at
    ingest in the upload store; 404 ``what`` when either is missing."""
    with services.db.connection() as conn:
        found_version = found(reading.version_to_read(conn, who.tenant_id, doc_id, version), "document version")
    view = services.document_store.get_view(who.tenant_id, found_version["content_hash"], name)
    if view is None:
        raise not_found(what)
    return found_version, view


@router.get("/documents/{doc_id}/pages/{page}/image", response_class=Response,
            responses={200: {"content": {page_views.IMAGE_TYPE: {}}}, 404: {"description": "no such page image"}})
def page_image(doc_id: DocId, page: Annotated[int, Path(ge=1, le=100_000)], who: Caller, services: Services,
               version: Version = None) -> Response:
    """The page as rendered at ingest (PDFs; other formats are read as text)."""
    _, image = _page_view(who, services, doc_id, version, page_views.image_name(page), "page image")
    return Response(image, media_type=page_views.IMAGE_TYPE, headers={"Cache-Control": IMAGE_CACHE})


@router.get("/documents/{doc_id}/pages/{page}/layout", response_model=PageLayoutOut)
def page_layout(doc_id: DocId, page: Annotated[int, Path(ge=1, le=100_000)], who: Caller, services: Services,
                version: Version = None) -> dict:
    """The page's text as laid out at ingest, each run with its box: PDFium's runs of text, or, on a page read by
    OCR, Tesseract's words (the inspector outlines them)."""
    found_version, layout = _page_view(who, services, doc_id, version, page_views.layout_name(page), "page layout")
    ocr, runs = page_views.read_page_layout(layout)
    return {"doc_id": doc_id, "version_number": found_version["version_number"], "page": page, "ocr": ocr,
            "runs": [{"text": text, "box": box} for text, box in runs]}


@router.get("/chunks/{chunk_id}/boxes", response_model=ChunkBoxesOut)
def chunk_boxes(chunk_id: Annotated[int, Path(ge=1, le=MAX_ID)], who: Caller, services: Services) -> dict:
    """Where the chunk lies on each of its pages: boxes ``[x0, y0, x1, y1]`` in fractions of the page's width and
    height from its top left corner, found from the text boxes PDFium gave at ingest, or OCR's words on a scanned
    page. A page without them (not rendered) has no boxes; a DOCX, PPTX or ODT laid out by LibreOffice lists the
    pages where its text is found."""
    with services.db.connection() as conn:
        chunk = found(reading.chunk_to_locate(conn, who.tenant_id, chunk_id), "chunk")
    store = services.document_store

    def layout_of(page: int) -> list:
        layout = store.get_view(who.tenant_id, chunk["content_hash"], page_views.layout_name(page))
        return page_views.read_layout(layout) if layout else []

    imaged, laid_out = _page_images(store, who.tenant_id, chunk)
    pages = []
    if laid_out and imaged:  # the layout's pages are not the chunk's: looked for near where its place would be
        guess = 1 + chunk["ordinal"] * imaged // max(chunk["chunk_count"], 1)
        reach = max(LAID_OUT_REACH, imaged // 10)
        nearby = range(max(1, guess - reach), min(imaged, guess + reach) + 1)
        # then everywhere, for a file of a few hundred pages at most: past that, a request's reads are bounded
        everywhere = len(nearby) < imaged <= LAID_OUT_SCAN_PAGES
        located = page_views.find_chunk(layout_of, chunk["text"], nearby) or (
            page_views.find_chunk(layout_of, chunk["text"], range(1, imaged + 1)) if everywhere else [])
        pages = [{"page": page, "boxes": boxes} for page, boxes in located]
    elif chunk["page_start"] is not None:
        for page in range(chunk["page_start"], (chunk["page_end"] or chunk["page_start"]) + 1):
            pages.append({"page": page, "boxes": page_views.chunk_boxes(layout_of(page), chunk["text"])})
    return {"chunk_id": chunk_id, "doc_id": chunk["doc_id"], "version_number": chunk["version_number"],
            "pages": pages}
