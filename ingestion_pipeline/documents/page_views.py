"""A PDF's pages as a person sees them: an image of each page and where its text lies, made once at ingest
(``render_pages``, in the extraction worker: PDFium parses untrusted input there), kept in the upload store beside
the file's bytes (``UploadStore.put_view``), and the boxes of a chunk on a page found from them (``chunk_boxes``).

The boxes come from PDFium's text rectangles (one per run of text on a line), each with the text it bounds, or, on
a page read by OCR, from Tesseract's words (``ocr.read_image``: the page has no text for PDFium). A chunk's text is
cleaned and joined from those same runs, so a run whose letters occur in the chunk's letters is the chunk's;
matching on letters and digits only makes the join's spaces, hyphens and line breaks irrelevant.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ingestion_pipeline.documents.extraction.elements import page_box

# 90 dpi: a page of text is readable in the inspector at its width (a few hundred KiB as JPEG)
RENDER_SCALE = 1.25
IMAGE_TYPE = "image/jpeg"
IMAGE_QUALITY = 80
# what a page keeps, its image and its layout together: a page of photographs encodes larger, and is encoded again
# until it fits (``_within_bytes``; benchmarks/page_images.py prints the bytes kept a page)
MAX_PAGE_BYTES = 200_000
MIN_IMAGE_BYTES = 100_000  # a page of dense text has a large layout: its image keeps at least this much
LOWER_QUALITIES = (65, 50, 35)
MAX_IMAGE_SIDE = 2000  # pixels: a US Letter page at the default scale is 765 x 990
# a run shorter than this (a page number, a bullet, "of") occurs in almost any chunk: it never starts a chain
MIN_RUN_LETTERS = 6
MAX_GAP_LETTERS = 40
MAX_MISSES = 3
_NOT_LETTER = re.compile(r"[\W_]+", re.UNICODE)


@dataclass
class PageView:
    """One page: its image and the runs of text on it, each ``[x0, y0, x1, y1]`` in fractions of the page's width
    and height from its top left corner."""

    page_number: int
    width_points: float
    height_points: float
    image: bytes
    runs: list[tuple[str, list[float]]] = field(default_factory=list)
    ocr: bool = False  # read by OCR: its runs are Tesseract's words

    def layout(self) -> bytes:
        """What is stored beside the image (``read_layout`` reads it back)."""
        return json.dumps({"page_number": self.page_number, "width_points": self.width_points,
                           "height_points": self.height_points, "ocr": self.ocr,
                           "runs": [{"text": text, "box": box} for text, box in self.runs]}).encode()


def image_name(page_number: int) -> str:
    return f"{page_number}.jpg"


def layout_name(page_number: int) -> str:
    return f"{page_number}.json"


def render_pages(path: Path, first_page: int, last_page: int, scale: float = RENDER_SCALE,
                 ocr_words: Mapping[int, list[tuple[str, list[float]]]] | None = None) -> list[PageView]:
    """Pages ``first_page``..``last_page`` (1-based, inclusive) of the PDF at ``path``: each rendered, with its
    text runs, or, for a page OCR read, its words (``ocr_words`` by page number: PDFium finds no text on a scan).
    A page PDFium cannot render is left out (the inspector then shows its text only)."""
    import pypdfium2 as pdfium

    views: list[PageView] = []
    pdf = pdfium.PdfDocument(str(path))
    try:
        last_page = min(last_page, len(pdf))
        for index in range(first_page - 1, last_page):
            try:
                page = pdf[index]
            except pdfium.PdfiumError:
                continue
            try:
                views.append(_view(page, index + 1, scale, (ocr_words or {}).get(index + 1)))
            except pdfium.PdfiumError:
                continue
            finally:
                page.close()
    finally:
        pdf.close()
    return views


def _view(page, page_number: int, scale: float, words: list[tuple[str, list[float]]] | None) -> PageView:
    width, height = page.get_size()
    # a page may declare any size (20,000 x 20,000 points): its image is capped, never its size times the scale
    scale = min(scale, MAX_IMAGE_SIDE / max(width, height, 1.0))
    bitmap = page.render(scale=scale)
    try:
        image = bitmap.to_pil().convert("RGB")
    finally:
        bitmap.close()
    if words is not None:
        view = PageView(page_number, round(width, 2), round(height, 2), b"", list(words), ocr=True)
    else:
        view = PageView(page_number, round(width, 2), round(height, 2), b"", _runs(page, width, height))
    # the budget is the image's and its layout's together: a page of dense text (or many words) keeps a smaller image
    view.image = _within_bytes(image, max(MIN_IMAGE_BYTES, MAX_PAGE_BYTES - len(view.layout())))
    return view


def _runs(page, width: float, height: float) -> list[tuple[str, list[float]]]:
    """PDFium's runs of text on the page, each with its box in fractions of the page."""
    runs: list[tuple[str, list[float]]] = []
    textpage = page.get_textpage()
    try:
        for i in range(textpage.count_rects()):
            left, bottom, right, top = textpage.get_rect(i)
            text = textpage.get_text_bounded(left, bottom, right, top)
            if not text.strip():
                continue
            runs.append((text, [_fraction(left, width), _fraction(height - top, height),
                                _fraction(right, width), _fraction(height - bottom, height)]))
    finally:
        textpage.close()
    return runs


def _within_bytes(image, limit: int) -> bytes:
    """The page as a JPEG of at most ``limit`` bytes: at a lower quality where it is over, then smaller (a page of
    noise): the box fractions stay right at any size."""
    encoded = _jpeg(image, IMAGE_QUALITY)
    for quality in LOWER_QUALITIES:
        if len(encoded) <= limit:
            return encoded
        encoded = _jpeg(image, quality)
    while len(encoded) > limit and min(image.size) > 64:
        image = image.resize((image.size[0] * 7 // 10, image.size[1] * 7 // 10))
        encoded = _jpeg(image, LOWER_QUALITIES[-1])
    return encoded


def _jpeg(image, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def _fraction(value: float, whole: float) -> float:
    return round(min(max(value / whole, 0.0), 1.0), 5) if whole else 0.0


def read_layout(data: bytes) -> list[tuple[str, list[float]]]:
    """The runs of a stored layout (``PageView.layout``); a malformed one reads as no runs."""
    return read_page_layout(data)[1]


def read_page_layout(data: bytes) -> tuple[bool, list[tuple[str, list[float]]]]:
    """Whether a stored layout's page was read by OCR, and its runs (Tesseract's words then); a malformed layout
    reads as no runs."""
    try:
        layout = json.loads(data)
        runs = [(run["text"], page_box(run["box"])) for run in layout["runs"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False, []
    if not all(isinstance(text, str) and box is not None for text, box in runs):
        return False, []
    return layout.get("ocr") is True, runs


def _letters(text: str) -> str:
    return _NOT_LETTER.sub("", text.replace("\x02", "")).casefold()


def chunk_boxes(runs: list[tuple[str, list[float]]], chunk_text: str) -> list[list[float]]:
    """The boxes on one page of the chunk whose text is ``chunk_text``, merged per line (``_best_chain``)."""
    chain = _best_chain(runs, _letters(chunk_text))
    return _merge_lines([runs[i][1] for i in chain.runs])


@dataclass(frozen=True)
class _Chain:
    runs: list[int]  # indexes into the page's runs
    cover: int = 0  # letters of the chunk they hold
    start: int = 0  # where in the chunk's letters the first begins
    end: int = 0  # and the last ends


def _best_chain(runs: list[tuple[str, list[float]]], letters: str) -> _Chain:
    """The longest chain of runs, in the page's order, whose letters follow each other in ``letters`` (a gap of at
    most ``MAX_GAP_LETTERS``, at most ``MAX_MISSES`` runs in a row that are not the chunk's: a page number, a
    running head). A word of the chunk that also stands alone elsewhere on the page (a title) is not part of it."""
    keys = [_letters(text) for text, _ in runs]
    best = _Chain([])
    chained: set[int] = set()
    for first, key in enumerate(keys):
        if first in chained or len(key) < MIN_RUN_LETTERS or key not in letters:
            continue
        start = letters.find(key)
        chain, pointer, misses = [first], start + len(key), 0
        for j in range(first + 1, len(runs)):
            if not keys[j]:
                continue
            found = letters.find(keys[j], pointer)
            if found < 0 or found - pointer > MAX_GAP_LETTERS:
                misses += 1
                if misses > MAX_MISSES:
                    break
                continue
            chain.append(j)
            pointer, misses = found + len(keys[j]), 0
        chained.update(chain)
        cover = sum(len(keys[i]) for i in chain)
        if cover > best.cover:
            best = _Chain(chain, cover, start, pointer)
    return best


def find_chunk(layout_of: Callable[[int], list[tuple[str, list[float]]]], chunk_text: str, pages: Sequence[int]
               ) -> list[tuple[int, list[list[float]]]]:
    """Where a chunk lies among ``pages`` when its page is not known (a file laid out by LibreOffice: the chunk's
    page numbers are the extractor's, not the layout's): the page whose runs cover most of its text, then the page
    before it when it holds the chunk's beginning that this one lacks, and the page after it for its end (a chunk
    across a page break). ``layout_of(page)`` gives a page's runs."""
    letters = _letters(chunk_text)
    if not letters:
        return []
    chains = {page: (_best_chain(runs, letters), runs) for page in pages if (runs := layout_of(page))}
    if not chains or max(chain.cover for chain, _ in chains.values()) == 0:
        return []
    best = max(chains, key=lambda page: (chains[page][0].cover, -page))
    found = {best: chains[best]}
    head, tail = letters[:chains[best][0].start], letters[chains[best][0].end:]
    for page, rest, keep_end in ((best - 1, head, True), (best + 1, tail, False)):
        if len(rest) < MIN_RUN_LETTERS or page not in chains:
            continue
        runs = chains[page][1]
        chain = _best_chain(runs, rest)
        # the page before must hold the rest up to its end, the page after from its start
        if chain.cover >= MIN_RUN_LETTERS and (len(rest) - chain.end <= MAX_GAP_LETTERS if keep_end
                                               else chain.start <= MAX_GAP_LETTERS):
            found[page] = (chain, runs)
    return [(page, _merge_lines([runs[i][1] for i in chain.runs])) for page, (chain, runs) in sorted(found.items())]


def _merge_lines(boxes: list[list[float]]) -> list[list[float]]:
    """Runs side by side on one line (overlapping vertically, in order) as one box."""
    merged: list[list[float]] = []
    for box in boxes:
        if merged:
            last = merged[-1]
            overlap = min(last[3], box[3]) - max(last[1], box[1])
            if overlap > 0.5 * min(last[3] - last[1], box[3] - box[1]) and box[0] >= last[0]:
                merged[-1] = [min(last[0], box[0]), min(last[1], box[1]), max(last[2], box[2]),
                              max(last[3], box[3])]
                continue
        merged.append(list(box))
    return merged
