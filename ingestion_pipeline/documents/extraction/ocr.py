"""OCR of PDF pages that have no text layer (scans), with Tesseract — the system's ``tesseract-ocr``.

A page is rendered by PDFium at 200 dpi in grey and handed to the ``tesseract`` command on stdin; one
thread per call (``OMP_THREAD_LIMIT=1``: with two cores, threads only slow it down), ~0.2–2 s a page.
Tesseract is a system package, not a Python one: without it such pages cannot be read, and the PDF
extractor says so and how to enable OCR. ``INGESTION_TESSERACT`` names another binary.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess

from ingestion_pipeline.documents.extraction.errors import ExtractionError

DPI = 200
PAGE_TIMEOUT_SECONDS = 120
HOW_TO_ENABLE = "install Tesseract (Debian/Ubuntu: apt-get install tesseract-ocr) and submit the file again"


def tesseract_binary() -> str | None:
    """The tesseract command, or None when it is not installed."""
    return shutil.which(os.environ.get("INGESTION_TESSERACT") or "tesseract")


def ocr_page(page, page_number: int, binary: str) -> str:
    """The text Tesseract reads on a PDFium page (``pypdfium2.PdfPage``)."""
    image = page.render(scale=DPI / 72, grayscale=True).to_pil()
    png = io.BytesIO()
    image.save(png, "PNG")
    try:
        result = subprocess.run([binary, "stdin", "stdout", "-l", "eng", "--psm", "3"], input=png.getvalue(),
                                capture_output=True, timeout=PAGE_TIMEOUT_SECONDS,
                                env={**os.environ, "OMP_THREAD_LIMIT": "1"})
    except subprocess.TimeoutExpired as exc:
        raise ExtractionError(f"OCR of PDF page {page_number} took longer than {PAGE_TIMEOUT_SECONDS} s",
                              code="ocr_timeout") from exc
    if result.returncode != 0:
        reason = " ".join(result.stderr.decode(errors="replace").split())[:300]
        raise ExtractionError(f"OCR of PDF page {page_number} failed: {reason}", code="ocr_failed")
    return result.stdout.decode("utf-8", errors="replace")
