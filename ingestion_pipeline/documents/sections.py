"""Sections of a big document: runs of its elements that are chunked on their own, and whose chunks a revision
reuses from the served version when the run is unchanged.

A document of more than ``INGESTION_UNIT_CHARACTERS`` characters of text (any format: DOCX, HTML, Markdown, text,
and a PDF once its pages are assembled) is cut into sections of about that many characters. A section only ever
begins at a title that follows text: there the chunker closes the running chunk whatever came before
(``chunking.chunk_elements``: a title opens a new chunk, runs of titles stay together), so chunking each section
alone gives exactly the chunks of the whole document, with their pages, section paths and, once numbered again,
their ordinals. A long run without such a title stays in one section, however long: a cut there would move chunk
boundaries.

Where a section ends is decided by its content, not by its position, so that an edit moves no boundary far from
it: past half the unit size, a section closes at the first such title whose text's hash picks it (one title in
``PICK``), and at the first one past twice the unit size regardless. An inserted paragraph changes its own
section's key; the sections after it begin at the same titles as before.

A section's key is the SHA-256 of what its chunks follow from: its elements (type, text, page, section path),
the chunking settings, the tokenizer's files (the model digest), the document's label (embedded in every chunk's
context line) and ``chunking.CHUNKER_VERSION``; a section that repeats an earlier one word for word gets a key
of its own by its count, so that keys are unique within a document. Each stored chunk keeps its section's key
(``chunks.section_key``, ``sql/042``); a new version of the document (same key, same S3 object) takes the chunks of
every section whose key its served version has — text, token count, pages, section path and types — instead of
counting and packing them again, and chunks only the changed sections. Every chunk's language is identified
again: a short chunk takes the file's main language, weighed over all of its chunks.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from ingestion_pipeline.documents.chunking import CHUNKER_VERSION, Chunk
from ingestion_pipeline.documents.extraction.elements import TITLE, Element

PICK = 4  # one title in PICK closes a section once it holds half the unit size


@dataclass(frozen=True)
class Section:
    number: int  # 0-based, in document order
    start: int  # index of its first element
    end: int  # one past its last element
    key: str


def recipe(*, target: int, hard_max: int, model_digest: str, label: str) -> str:
    """What, besides its elements, decides a section's chunks."""
    return json.dumps({"chunker": CHUNKER_VERSION, "target": target, "hard_max": hard_max,
                       "model": model_digest, "label": label}, sort_keys=True)


def section_key(recipe_text: str, elements: Sequence[Element]) -> str:
    digest = hashlib.sha256(recipe_text.encode())
    for el in elements:
        digest.update(json.dumps([el.type, el.text, el.page_number, el.section_path]).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _picked(title: Element) -> bool:
    return int.from_bytes(hashlib.sha256(title.text.encode()).digest()[:4], "big") % PICK == 0


def boundaries(elements: Sequence[Element], unit_chars: int) -> list[int]:
    """The element indexes where a section begins after the first (empty: the document is one section)."""
    if unit_chars < 1:
        raise ValueError(f"a section of {unit_chars} characters")
    if sum(len(el.text) for el in elements) <= unit_chars:
        return []
    cuts: list[int] = []
    held = 0  # characters of the running section
    for i, el in enumerate(elements):
        if (i and el.type == TITLE and elements[i - 1].type != TITLE
                and (held >= 2 * unit_chars or held >= unit_chars // 2 and _picked(el))):
            cuts.append(i)
            held = 0
        held += len(el.text)
    return cuts


def plan_sections(elements: Sequence[Element], unit_chars: int, recipe_text: str) -> list[Section]:
    """The document's sections, each with its key; one section without a key (the whole document, which is
    neither looked up nor kept by key) when it is not cut."""
    cuts = boundaries(elements, unit_chars)
    if not cuts:
        return [Section(0, 0, len(elements), "")]
    starts = [0, *cuts]
    ends = [*cuts, len(elements)]
    planned, seen = [], Counter()
    for n, (start, end) in enumerate(zip(starts, ends, strict=True)):
        key = section_key(recipe_text, elements[start:end])
        seen[key] += 1
        if seen[key] > 1:  # the same section again (a chapter repeated word for word): a key of its own, by count
            key = hashlib.sha256(f"{key}:{seen[key]}".encode()).hexdigest()
        planned.append(Section(n, start, end, key))
    return planned


def stored_chunks(conn: psycopg.Connection, tenant_id: str, doc_id: int | None,
                  keys: Sequence[str]) -> dict[str, list[Chunk]]:
    """The chunks of the document's served version whose section has one of ``keys``, by key, in order. Their
    context line and language are the caller's to set: one follows from the label and the section path, the
    other (for a short chunk) from the whole file's languages."""
    if doc_id is None or not keys:
        return {}
    found: dict[str, list[Chunk]] = {}
    for row in conn.execute(
        """SELECT c.section_key, c.text, c.token_count, c.page_start, c.page_end, c.section_path, c.element_types
             FROM document_versions v JOIN chunks c ON c.version_id = v.version_id
            WHERE v.tenant_id = %s AND v.doc_id = %s AND v.is_active AND c.tenant_id = %s
              AND c.section_key = ANY(%s)
            ORDER BY c.ordinal""",
        (tenant_id, doc_id, tenant_id, list(keys)),
    ):
        found.setdefault(row["section_key"], []).append(Chunk(
            ordinal=0, text=row["text"], token_count=row["token_count"], page_start=row["page_start"],
            page_end=row["page_end"], section_path=list(row["section_path"]),
            element_types=list(row["element_types"])))
    return found
