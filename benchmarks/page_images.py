"""What the web app's page images cost at ingest: rendering against reading, and the bytes kept a page.

For each document: the extractor's own time (the text layer, OCR for a scan, the DOCX reader), then the pages
rendered as ingest renders them (``documents/page_views.render_pages``: the image and the text boxes), for a DOCX
after LibreOffice lays it out (``documents/office_pages.py``); the bytes a page keeps in the upload store (image
and layout: a scanned page's is OCR's words). Then what keeping OCR's word boxes adds to reading a scanned page.
Every step runs in this process, one core, one at a time.

    .venv/bin/python benchmarks/page_images.py [--corpus ../shared/corpus] [--scan-pages 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingestion_pipeline.documents.extraction import extract  # noqa: E402
from ingestion_pipeline.documents.office_pages import converted_to_pdf, soffice_binary  # noqa: E402
from ingestion_pipeline.documents.page_views import render_pages  # noqa: E402


def _scan(folder: Path, pages: int) -> Path:
    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages

    lines = [[f"Page {p}: the inspection of the northern pier, entry {i}, wind and tide as logged." for i in range(30)]
             for p in range(1, pages + 1)]
    return write_scanned_pages(folder / "scan.pdf", lines)


def _rendered(pdf: Path, words: dict | None = None) -> tuple[float, list[int]]:
    """Seconds to render every page, and each page's stored bytes (image and layout; a scanned page's layout is
    OCR's words, ``words``, as the extract step keeps it)."""
    started = time.perf_counter()
    views = render_pages(pdf, 1, 1 << 30, ocr_words=words)
    seconds = time.perf_counter() - started
    return seconds, [len(view.image) + len(view.layout()) for view in views]


def _word_boxes_cost(scan: Path, rounds: int = 3) -> None:
    """What keeping OCR's word boxes costs: Tesseract asked for its text alone, against its text and its words (TSV)
    in the same pass, as ``ocr.read_image`` asks; the same pages, alternated, best of ``rounds``."""
    import io
    import os
    import subprocess

    import pypdfium2 as pdfium

    from ingestion_pipeline.documents.extraction import ocr

    binary = ocr.tesseract_binary()
    pdf = pdfium.PdfDocument(str(scan))
    images = [ocr.render(pdf[i]) for i in range(len(pdf))]
    pngs = []
    for image in images:
        out = io.BytesIO()
        image.save(out, "PNG")
        pngs.append(out.getvalue())
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    def text_only() -> None:
        for png in pngs:
            subprocess.run([binary, "stdin", "stdout", "-l", "eng", "--psm", "3"], input=png, capture_output=True,
                           env=env, check=True)

    def with_words() -> None:
        for number, image in enumerate(images, 1):
            ocr.read_image(image, number, binary)

    best = {text_only: float("inf"), with_words: float("inf")}
    for _ in range(rounds):
        for way in best:
            started = time.perf_counter()
            way()
            best[way] = min(best[way], (time.perf_counter() - started) / len(images))
    print(f"OCR of a scanned page: text only {best[text_only] * 1000:.0f} ms, text and word boxes "
          f"{best[with_words] * 1000:.0f} ms ({best[with_words] / best[text_only] - 1:+.1%}; best of {rounds})")


def _row(name: str, pages: int, read_s: float, render_s: float, sizes: list[int], layout_s: float = 0.0) -> None:
    per_read = read_s / pages * 1000
    per_render = (render_s + layout_s) / pages * 1000
    print(f"{name:34} {pages:5d} pages  read {per_read:7.1f} ms/page  render {per_render:6.1f} ms/page "
          f"({(render_s + layout_s) / read_s:6.1%} of reading)  stored {statistics.mean(sizes) / 1024:6.1f} KiB/page "
          f"mean, {max(sizes) / 1024:6.1f} max")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--scan-pages", type=int, default=6)
    args = parser.parse_args()
    documents = args.corpus / "documents"
    print("page images: each document read as ingest reads it, then its pages rendered (one core)")

    for name in ("DA-619p.pdf", "layout-parser-paper-fast.pdf", "fr_olap.pdf"):
        started = time.perf_counter()
        document = extract(documents / name, ".pdf")
        read_s = time.perf_counter() - started
        render_s, sizes = _rendered(documents / name)
        _row(name, document.page_count, read_s, render_s, sizes)

    with tempfile.TemporaryDirectory() as folder:
        scan = _scan(Path(folder), args.scan_pages)
        started = time.perf_counter()
        document = extract(scan, ".pdf")
        read_s = time.perf_counter() - started
        if not document.ocr_pages:
            print("scan: not read by OCR (tesseract missing?): no comparison")
        else:
            words = {page.page_number: page.words or [] for page in document.ocr_pages}
            render_s, sizes = _rendered(scan, words)
            _row(f"a scan ({args.scan_pages} pages, OCR)", args.scan_pages, read_s, render_s, sizes)
            _word_boxes_cost(scan)

    if soffice_binary() is None:
        print("DOCX: LibreOffice is not installed: not laid out")
        return
    for name in ("handbook-872p.docx", "page-breaks.docx"):
        started = time.perf_counter()
        extract(documents / name, ".docx")
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        with converted_to_pdf(documents / name, ".docx", timeout_seconds=900) as pdf:
            layout_s = time.perf_counter() - started
            if pdf is None:
                print(f"{name}: LibreOffice could not lay it out")
                continue
            render_s, sizes = _rendered(pdf)
        _row(f"{name} (LibreOffice {layout_s:.1f} s)", len(sizes), read_s, render_s, sizes, layout_s)


if __name__ == "__main__":
    main()
