"""The pages of a PDF rendered at ingest, for people to read (the web app's inspector): part of the extract step,
a big PDF's pages by the unit that reads them, on whichever worker reads it (``documents/page_views.py``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.documents.extraction import ExtractionError
from ingestion_pipeline.documents.office_pages import CONVERTIBLE, MANIFEST, converted_to_pdf
from ingestion_pipeline.documents.page_views import image_name, layout_name

log = logging.getLogger("ingestion_pipeline.documents")

# pages asked of the extraction worker at a time: its reply (their images) stays a few MB
PAGES_PER_ASK = 16


def keep_page_images(run, row: dict, path: Path, first_page: int, last_page: int) -> int:
    """Render pages ``first_page``..``last_page`` of the file's PDF at ``path`` and keep each image and layout in the
    upload store under the tenant and the file's SHA-256; the pages kept. A page that cannot be rendered, or a
    failed render, costs the inspector its image and nothing else: the file's text is what is served."""
    render = getattr(run.extract_file, "render", None)
    if render is None or not run.settings.limits.page_images:
        return 0
    kept = 0
    for start in range(first_page, last_page + 1, PAGES_PER_ASK):
        try:
            views = render(path, start, min(last_page, start + PAGES_PER_ASK - 1))
        except (ExtractionError, TransientError) as exc:
            log.warning("%s: pages %d-%d not rendered (%s); the inspector shows their text only",
                        row.get("filename") or row["run_id"], start, last_page, exc)
            return kept
        for view in views:
            run.store.put_view(row["tenant_id"], row["content_hash"], image_name(view.page_number), view.image)
            run.store.put_view(row["tenant_id"], row["content_hash"], layout_name(view.page_number), view.layout())
            kept += 1
    return kept


def keep_office_page_images(run, row: dict, path: Path, extension: str) -> int:
    """A DOCX, PPTX or ODT laid out as pages by LibreOffice (``office_pages.py``), rendered like a PDF's, with a
    manifest saying how many (its chunks' page numbers are the extractor's, not this layout's: a chunk is found on
    these pages by its text). Nothing when LibreOffice is not installed or cannot lay it out."""
    if (extension.lower() not in CONVERTIBLE or not run.settings.limits.page_images
            or getattr(run.extract_file, "render", None) is None):
        return 0
    with converted_to_pdf(path, extension, memory_mb=run.settings.limits.memory_mb,
                          timeout_seconds=run.settings.limits.timeout_seconds) as pdf:
        if pdf is None:
            return 0
        try:  # its page count only (every page of a PDF this small is looked at by nobody)
            pages = run.extract_file.survey(pdf, 1 << 30).page_count
        except (ExtractionError, TransientError) as exc:
            log.warning("%s: its layout could not be read (%s); its pages are not shown", row["run_id"], exc)
            return 0
        kept = keep_page_images(run, row, pdf, 1, pages)
    if kept:
        run.store.put_view(row["tenant_id"], row["content_hash"], MANIFEST,
                           json.dumps({"pages": kept, "laid_out_by": "libreoffice"}).encode())
    return kept
