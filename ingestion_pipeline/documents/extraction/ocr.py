"""OCR of PDF pages that have no text layer (scans), with Tesseract — the system's ``tesseract-ocr``.

A page is rendered by PDFium at 200 dpi in grey and handed to the ``tesseract`` command on stdin; one
thread per call (``OMP_THREAD_LIMIT=1``: with two cores, threads only slow it down), ~0.2–2 s a page.
Tesseract is a system package, not a Python one: without it such pages cannot be read, and the PDF
extractor says so and how to enable OCR. ``INGESTION_TESSERACT`` names another binary.

OCR is the most expensive thing done to a page, so a page is never read twice: the SHA-256 of its rendered
image (``image_digest``) keys the text, and a new version of a document reuses the text of every page whose
image is unchanged (``ReadPage``; kept with each version, ``version_ocr_pages``). A page whose source — its
images' encoded bytes and placement (``source_digest``) — is unchanged is not even rendered. The engine's name
and version (``engine``) is part of the key: another Tesseract reads again.

A blank page is never handed to Tesseract: one that draws nothing is not even rendered (``pdf.py``), and one
whose rendered image is a single even shade (a white sheet scanned, objects that mark nothing) is not read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import subprocess
from collections.abc import Iterable

import pypdfium2.raw as pdfium_c

from ingestion_pipeline.documents.extraction.elements import ReadPage
from ingestion_pipeline.documents.extraction.errors import ExtractionError

DPI = 200
PAGE_TIMEOUT_SECONDS = 120
# A rendered page whose pixels span no more grey levels than this is blank. Text Tesseract reads spans far more
# (grey 235 on white: ~30 levels); a page that marks nothing renders as one shade.
BLANK_GREY_LEVELS = 2
HOW_TO_ENABLE = "install Tesseract (Debian/Ubuntu: apt-get install tesseract-ocr) and submit the file again"


def tesseract_binary() -> str | None:
    """The tesseract command, or None when it is not installed."""
    return shutil.which(os.environ.get("INGESTION_TESSERACT") or "tesseract")


@functools.lru_cache(maxsize=4)
def engine(binary: str) -> str:
    """What reads the pages, as a key of its text: ``tesseract 5.3.0 eng psm3 200dpi``."""
    try:
        result = subprocess.run([binary, "--version"], capture_output=True, timeout=30)
        first = (result.stdout or result.stderr).decode(errors="replace").splitlines()
        version = " ".join(first[0].split()) if first else "tesseract"
    except (OSError, subprocess.TimeoutExpired):
        version = "tesseract"
    return f"{version} eng psm3 {DPI}dpi"


def render(page):
    """The page (``pypdfium2.PdfPage``) as the grey image OCR reads (a PIL image)."""
    return page.render(scale=DPI / 72, grayscale=True).to_pil()


def is_blank(image) -> bool:
    """Whether the rendered page is one even shade: nothing for OCR to read (~1 ms, against 0.2-2 s of OCR)."""
    low, high = image.getextrema()
    return high - low <= BLANK_GREY_LEVELS


def image_digest(image) -> str:
    """SHA-256 of the rendered image's size and pixels: equal for an unchanged page in a rewritten PDF."""
    digest = hashlib.sha256(f"{image.mode} {image.size[0]}x{image.size[1]}\n".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def read_image(image, page_number: int, binary: str) -> str:
    """The text Tesseract reads on a rendered page."""
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


def source_digest(page) -> str | None:
    """SHA-256 of what a scanned page is drawn from — its images' encoded data, size and placement, and the
    page's boxes and rotation — when the page holds images only (a scan); None otherwise. ~0.5 ms against
    ~60 ms to render: an unchanged page of a rewritten scan is recognised without rendering it."""
    objects = list(page.get_objects(max_depth=0))
    if not objects or any(o.type != pdfium_c.FPDF_PAGEOBJ_IMAGE for o in objects):
        return None
    digest = hashlib.sha256(repr((page.get_mediabox(), page.get_cropbox(), page.get_rotation())).encode())
    for image in objects:
        digest.update(repr((image.get_matrix().get(), image.get_px_size(), image.get_filters())).encode())
        digest.update(bytes(image.get_data(decode_simple=False)))
    return digest.hexdigest()


class KnownPages:
    """The text of pages read before, by (engine, source digest) and by (engine, image digest)."""

    def __init__(self, pages: Iterable[ReadPage]) -> None:
        pages = list(pages)
        self.by_image = {(p.engine, p.image_sha256): p for p in pages}
        self.by_source = {(p.engine, p.source_sha256): p for p in pages if p.source_sha256}


def read_page(page, page_number: int, binary: str, known: KnownPages) -> ReadPage | None:
    """The page's text: an earlier version's where the page is unchanged — the same source (not even rendered)
    or the same rendered image — otherwise read by Tesseract; None for a page that renders blank (not read)."""
    name, source = engine(binary), source_digest(page)
    if source and (name, source) in known.by_source:
        same = known.by_source[(name, source)]
        return ReadPage(page_number, same.image_sha256, name, same.text, source, reused=True)
    image = render(page)
    if is_blank(image):
        return None
    digest = image_digest(image)
    if (name, digest) in known.by_image:
        return ReadPage(page_number, digest, name, known.by_image[(name, digest)].text, source, reused=True)
    return ReadPage(page_number, digest, name, read_image(image, page_number, binary), source)
