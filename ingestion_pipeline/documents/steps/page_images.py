"""The pages of a PDF rendered at ingest, for people to read (the web app's inspector): part of the extract step,
a big PDF's pages by the unit that reads them, on whichever worker reads it (``documents/page_views.py``)."""

from __future__ import annotations

import logging
from pathlib import Path

from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.documents.extraction import ExtractionError
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
