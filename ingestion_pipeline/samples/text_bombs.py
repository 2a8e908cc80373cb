"""Office files that are small on disk and hold far more text than a file should: the hostile-input tests and
``benchmarks/hostile_inputs.py`` send them to show ``file_too_much_text``. Random words compress ~3:1, under the
zip-bomb ratio check, so it is the text limit that stops them."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

WORDS = [f"{a}{b}{c}" for a in "bcdfghklmnprstvz" for b in "aeiou" for c in "lmnrst"]


def paragraphs(characters: int, seed: int) -> list[str]:
    """Paragraphs of random words (they compress ~3:1, under the zip-bomb ratio check) of ``characters``."""
    rng = random.Random(seed)
    found, total = [], 0
    while total < characters:
        paragraph = " ".join(rng.choices(WORDS, k=150))
        found.append(paragraph)
        total += len(paragraph)
    return found


def docx_with_text(path: Path, characters: int) -> Path:
    body = "".join(f"<w:p><w:r><w:t>{escape(p)}</w:t></w:r></w:p>" for p in paragraphs(characters, 1))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("[Content_Types].xml", (
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName='
            '"/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.'
            'document.main+xml"/></Types>'))
        package.writestr("_rels/.rels", (
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
            '2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/'
            '2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>'))
        package.writestr("word/document.xml", (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.'
            f'openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>'))
    return path


def xlsx_with_text(path: Path, characters: int) -> Path:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet("data")
    texts = paragraphs(characters, 2)
    for start in range(0, len(texts), 4):
        sheet.append(texts[start:start + 4])
    book.save(path)
    return path
