"""The pages of a PDF rendered at ingest, for people to read (the web app's inspector): part of the extract step,
a big PDF's pages by the unit that reads them, on whichever worker reads it (``documents/page_views.py``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from ingestion_pipeline.documents.extraction import ReadPage
from ingestion_pipeline.documents.office_pages import CONVERTIBLE, MANIFEST, converted_to_pdf
from ingestion_pipeline.documents.page_views import image_name, layout_name

log = logging.getLogger("ingestion_pipeline.documents")

# pages asked of the extraction worker at a time: its reply (their images) stays a few MB
PAGES_PER_ASK = 16


def keep_page_images(run, row: dict, path: Path, first_page: int, last_page: int,
                     read_pages: Iterable[ReadPage] = ()) -> int:
    """Render pages ``first_page``..``last_page`` of the file's PDF at ``path`` and keep each image and layout in the
    upload store under the tenant and the file's SHA-256; the pages kept. A page OCR read (``read_pages``) has no
    text for PDFium: its layout is OCR's words. A page that cannot be rendered, or a failed render, costs the
    inspector its image and nothing else: the file's text is what is served."""
    render = getattr(run.extract_file, "render", None)
    if render is None or not run.settings.limits.page_images:
        return 0
    by_ocr = {page.page_number: page.words or [] for page in read_pages}
    kept = 0
    for start in range(first_page, last_page + 1, PAGES_PER_ASK):
        try:
            end = min(last_page, start + PAGES_PER_ASK - 1)
            views = render(path, start, end, {n: words for n, words in by_ocr.items() if start <= n <= end})
            for view in views:
                run.store.put_view(row["tenant_id"], row["content_hash"], image_name(view.page_number), view.image)
                run.store.put_view(row["tenant_id"], row["content_hash"], layout_name(view.page_number),
                                   view.layout())
                kept += 1
        except Exception as exc:  # the worker, the store, anything: the file's text is served all the same
            log.warning("file %s: pages %d-%d not rendered or kept (%s: %s); the inspector shows their text only",
                        row["file_id"], start, last_page, type(exc).__name__, exc)
            return kept
    return kept


def keep_office_page_images(run, row: dict, path: Path, extension: str) -> int:
    """A DOCX, PPTX or ODT laid out as pages by LibreOffice (``office_pages.py``), rendered like a PDF's, with a
    manifest saying how many (its chunks' page numbers are the extractor's, not this layout's: a chunk is found on
    these pages by its text). Nothing when LibreOffice is not installed or cannot lay it out."""
    if (extension.lower() not in CONVERTIBLE or not run.settings.limits.page_images
            or getattr(run.extract_file, "render", None) is None):
        return 0
    try:
        with converted_to_pdf(path, extension, memory_mb=run.settings.limits.memory_mb,
                              timeout_seconds=run.settings.limits.timeout_seconds) as pdf:
            if pdf is None:
                return 0
            # its page count only (the survey looks at no page of a PDF of fewer pages than asked)
            pages = run.extract_file.survey(pdf, 1 << 30).page_count
            kept = keep_page_images(run, row, pdf, 1, pages)
        if kept:
            run.store.put_view(row["tenant_id"], row["content_hash"], MANIFEST,
                               json.dumps({"pages": kept, "laid_out_by": "libreoffice"}).encode())
        return kept
    except Exception as exc:  # LibreOffice, the worker, the store: the file's text is served all the same
        log.warning("file %s: not laid out as pages (%s: %s); the inspector shows its text only", row["file_id"],
                    type(exc).__name__, exc)
        return 0
