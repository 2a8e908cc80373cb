"""OCR of PDF pages that have no text layer (scans), with Tesseract — the system's ``tesseract-ocr``.

A page is rendered by PDFium at 200 dpi in grey and handed to the ``tesseract`` command on stdin; one
thread per call (``OMP_THREAD_LIMIT=1``: with two cores, threads only slow it down); benchmarks/page_images.py
times a page.
Tesseract is a system package, not a Python one: without it such pages cannot be read, and the PDF
extractor says so and how to enable OCR. ``INGESTION_TESSERACT`` names another binary.

OCR is the most expensive thing done to a page, so a page is never read twice: the SHA-256 of its rendered
image (``image_digest``) keys the text, and a new version of a document reuses the text of every page whose
image is unchanged (``ReadPage``; kept with each version, ``version_ocr_pages``). A page whose source — its
images' encoded bytes and placement (``source_digest``) — is unchanged is not even rendered. The engine's name
and version (``engine``) is part of the key: another Tesseract reads again.

Tesseract writes the page's text and its words' boxes (TSV) in the same pass: the boxes are where the web app
outlines a passage on a scanned page, kept with the text (``ReadPage.words``) and reused with it.

A blank page is never handed to Tesseract: one that draws nothing is not even rendered (``pdf.py``), and one
whose rendered image is a single even shade (a white sheet scanned, objects that mark nothing) is not read.
"""

from __future__ import annotations

import functools
import hashlib
import io
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pypdfium2.raw as pdfium_c

from ingestion_pipeline.documents.extraction.elements import ReadPage
from ingestion_pipeline.documents.extraction.errors import ExtractionError

log = logging.getLogger("ingestion_pipeline.extraction")

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
    """Whether the rendered page is one even shade: nothing for OCR to read (a look at its extremes, far cheaper
    than reading it)."""
    low, high = image.getextrema()
    return high - low <= BLANK_GREY_LEVELS


def image_digest(image) -> str:
    """SHA-256 of the rendered image's size and pixels: equal for an unchanged page in a rewritten PDF."""
    digest = hashlib.sha256(f"{image.mode} {image.size[0]}x{image.size[1]}\n".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def read_image(image, page_number: int, binary: str, words: bool = True) -> tuple[str, list[Word] | None]:
    """The text Tesseract reads on a rendered page, and its words with their boxes (``words_of``; None when not
    asked for: they make the pass slower, benchmarks/page_images.py measures by how much)."""
    png = io.BytesIO()
    image.save(png, "PNG")
    with tempfile.TemporaryDirectory(prefix="ocr-") as folder:
        out = Path(folder) / "page"
        try:
            result = subprocess.run([binary, "stdin", str(out), "-l", "eng", "--psm", "3", "txt",
                                     *(["tsv"] if words else [])],
                                    input=png.getvalue(), capture_output=True, timeout=PAGE_TIMEOUT_SECONDS,
                                    env={**os.environ, "OMP_THREAD_LIMIT": "1"})
        except subprocess.TimeoutExpired as exc:
            raise ExtractionError(f"OCR of PDF page {page_number} took longer than {PAGE_TIMEOUT_SECONDS} s",
                                  code="ocr_timeout") from exc
        if result.returncode != 0:
            reason = " ".join(result.stderr.decode(errors="replace").split())[:300]
            raise ExtractionError(f"OCR of PDF page {page_number} failed: {reason}", code="ocr_failed")
        try:
            text = out.with_suffix(".txt").read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise ExtractionError(f"OCR of PDF page {page_number} failed: Tesseract wrote no text ({exc})",
                                  code="ocr_failed") from exc
        if not words:
            return text, None
        try:
            tsv = out.with_suffix(".tsv").read_bytes().decode("utf-8", errors="replace")
        except OSError:
            # a Tesseract without the tsv config (an older one, a tessdata folder of languages only): the text is
            # what is served; the page is shown without its words outlined
            log.warning("OCR of PDF page %d: Tesseract wrote no word boxes (TSV); its text is kept", page_number)
            return text, None
    return text, words_of(tsv, *image.size)


# a word and its box [x0, y0, x1, y1] in fractions of the page's width and height from its top left corner
Word = tuple[str, list[float]]


def words_of(tsv: str, width: int, height: int) -> list[Word]:
    """The words of Tesseract's TSV (level 5 rows: ``level page block par line word left top width height conf
    text``) in reading order, with boxes as fractions of the image read. A malformed row is skipped: the boxes
    only outline a passage, the text is what is served."""
    words: list[Word] = []
    if width <= 0 or height <= 0:
        return words
    for line in tsv.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) < 12 or fields[0] != "5" or not fields[11].strip():
            continue
        try:
            left, top, w, h = (int(v) for v in fields[6:10])
        except ValueError:
            continue
        if w < 0 or h < 0:
            continue
        words.append((fields[11].strip(), [round(min(max(v, 0.0), 1.0), 5) for v in
                                           (left / width, top / height, (left + w) / width, (top + h) / height)]))
    return words


def source_digest(page) -> str | None:
    """SHA-256 of what a scanned page is drawn from — its images' encoded data, size and placement, and the
    page's boxes and rotation — when the page holds images only (a scan); None otherwise. Far cheaper than
    rendering: an unchanged page of a rewritten scan is recognised without rendering it."""
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


def reusable_sources(pages: Iterable[ReadPage], words: bool) -> list[str]:
    """The source digests of the pages ``read_page`` will reuse without rendering: their OCR work is done (a page
    without its words is read again when they are wanted)."""
    return sorted({p.source_sha256 for p in pages if p.source_sha256 and (p.words is not None or not words)})


def read_page(page, page_number: int, binary: str, known: KnownPages, words: bool = True) -> ReadPage | None:
    """The page's text (and its words' boxes, ``words``): an earlier version's where the page is unchanged — the
    same source (not even rendered) or the same rendered image — otherwise read by Tesseract; None for a page that
    renders blank (not read)."""
    name, source = engine(binary), source_digest(page)
    # a page read before without its words is read again when they are wanted (once: then they are kept)
    if source and (same := known.by_source.get((name, source))) and (same.words is not None or not words):
        return ReadPage(page_number, same.image_sha256, name, same.text, source, reused=True, words=same.words)
    image = render(page)
    if is_blank(image):
        return None
    digest = image_digest(image)
    if (same := known.by_image.get((name, digest))) and (same.words is not None or not words):
        return ReadPage(page_number, digest, name, same.text, source, reused=True, words=same.words)
    text, boxes = read_image(image, page_number, binary, words)
    return ReadPage(page_number, digest, name, text, source, words=boxes)
