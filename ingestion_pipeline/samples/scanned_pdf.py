"""Write PDFs whose pages are images of text (scans: no text layer), or blank pages, optionally after the pages
of another PDF, for the OCR tests, the benchmarks and the demo."""

from __future__ import annotations

from pathlib import Path


def write_scanned_pdf(path: Path, lines: list[str], *, after: Path | None = None) -> Path:
    """One scanned page holding ``lines`` (Pillow's bundled font at 200 dpi), appended to ``after``'s pages."""
    return write_scanned_pages(path, [lines], after=after)


def write_scanned_pages(path: Path, pages: list[list[str]], *, after: Path | None = None) -> Path:
    """A scanned page per item of ``pages`` (each its lines), appended to ``after``'s pages."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    images = []
    for lines in pages:
        image = Image.new("L", (1700, 2200), 255)  # US Letter at 200 dpi, white
        draw = ImageDraw.Draw(image)
        for i, line in enumerate(lines):
            draw.text((150, 200 + 80 * i), line, font=font, fill=0)
        images.append(image)
    scan = path.with_suffix(".scan.pdf")
    images[0].save(scan, "PDF", resolution=200, save_all=True, append_images=images[1:])
    document = pdfium.PdfDocument(str(after)) if after else pdfium.PdfDocument.new()
    scanned = pdfium.PdfDocument(str(scan))
    document.import_pages(scanned)
    document.save(str(path))
    scanned.close()
    document.close()
    scan.unlink()
    return path


def write_blank_pages(path: Path, pages: int, *, after: Path | None = None) -> Path:
    """``pages`` US Letter pages that draw nothing (no object at all: ~125 bytes each), after ``after``'s pages."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(after)) if after else pdfium.PdfDocument.new()
    for _ in range(pages):
        document.new_page(612, 792).close()
    document.save(str(path))
    document.close()
    return path
