"""Sections of a big document: cut only where the chunker closes a chunk anyway, so that chunking them one by
one gives the whole document's chunks; and placed by content, so that an edit changes its own section's key."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import pytest

from ingestion_pipeline.documents import sections
from ingestion_pipeline.documents.chunking import chunk_elements
from ingestion_pipeline.documents.embedding import default_model_path
from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.extraction.elements import NARRATIVE_TEXT, TITLE, Element
from ingestion_pipeline.documents.tokens import load_token_counter

RECIPE = sections.recipe(target=200, hard_max=222, model_digest="m", label="doc")


@pytest.fixture(scope="module")
def counter():
    return load_token_counter(default_model_path())


def _document(headings: int, paragraphs: int = 6, chars: int = 500) -> list[Element]:
    elements = []
    for h in range(headings):
        elements.append(Element(TITLE, f"Part {h}", level=1))
        elements.append(Element(TITLE, f"Chapter {h}", level=2))  # a run of titles: never cut inside it
        elements += [Element(NARRATIVE_TEXT, f"Paragraph {h}.{p} " + "word " * (chars // 5))
                     for p in range(paragraphs)]
    return elements


def test_a_document_up_to_the_unit_is_one_section_without_a_key():
    elements = _document(3)
    assert sections.plan_sections(elements, 10**6, RECIPE) == [sections.Section(0, 0, len(elements), "")]


def test_sections_begin_only_at_a_heading_after_text_and_hold_about_the_unit():
    elements = _document(60)  # ~3,000 characters a heading, 180,000 in all
    planned = sections.plan_sections(elements, 20_000, RECIPE)
    assert len(planned) > 3
    assert planned[0].start == 0 and planned[-1].end == len(elements)
    assert all(a.end == b.start for a, b in pairwise(planned))  # every element once, in order
    for section in planned[1:]:
        assert elements[section.start].type == TITLE and elements[section.start - 1].type != TITLE
    sizes = [sum(len(el.text) for el in elements[s.start:s.end]) for s in planned]
    assert all(size >= 10_000 for size in sizes[:-1]) and max(sizes) <= 2 * 20_000 + 3_200, sizes
    assert len({s.key for s in planned}) == len(planned)


def test_text_without_headings_stays_one_section_however_long():
    elements = [Element(NARRATIVE_TEXT, "word " * 1000) for _ in range(100)]  # 500,000 characters
    assert len(sections.plan_sections(elements, 10_000, RECIPE)) == 1


def test_an_edit_changes_its_own_sections_key_and_no_boundary_after_it():
    elements = _document(80)
    before = sections.plan_sections(elements, 20_000, RECIPE)
    edited = list(elements)
    middle = before[len(before) // 2]
    target = middle.start + 3
    edited[target] = dataclasses.replace(edited[target], text=edited[target].text + " One more sentence here.")
    after = sections.plan_sections(edited, 20_000, RECIPE)
    changed = {s.key for s in after} - {s.key for s in before}
    assert len(changed) == 1  # the edited section's key; every other section is found again
    assert [s.start for s in after] == [s.start for s in before]


def test_the_key_follows_the_recipe():
    elements = _document(40)
    other = sections.recipe(target=200, hard_max=222, model_digest="another tokenizer", label="doc")
    keys = {s.key for s in sections.plan_sections(elements, 20_000, RECIPE)}
    assert keys.isdisjoint(s.key for s in sections.plan_sections(elements, 20_000, other))


def _fields(chunks):
    return [(c.text, c.token_count, c.page_start, c.page_end, c.section_path, c.element_types) for c in chunks]


@pytest.mark.parametrize("name", ["book-war-and-peace-1225p.txt", "handbook-872p.docx", "DA-619p.pdf"])
def test_chunking_section_by_section_gives_the_whole_documents_chunks(counter, corpus_dir, name):
    elements = extract(corpus_dir / "documents" / name, "." + name.rsplit(".", 1)[1]).elements
    planned = sections.plan_sections(elements, 30_000, RECIPE)
    assert len(planned) > 5, len(planned)
    whole = chunk_elements(elements, counter, target=200, hard_max=222)
    by_section = [c for s in planned for c in chunk_elements(elements[s.start:s.end], counter, target=200,
                                                             hard_max=222)]
    assert _fields(by_section) == _fields(whole)  # no text lost or doubled at an edge, the same pages and paths


def test_a_section_repeated_word_for_word_has_a_key_of_its_own():
    """Keys are unique within a document, so a revision never takes one repeated section's chunks twice."""
    chapter = [Element(TITLE, "Safety instructions", level=1),
               *[Element(NARRATIVE_TEXT, f"Rule {p}. " + "word " * 900) for p in range(5)]]
    planned = sections.plan_sections(chapter * 12, 20_000, RECIPE)  # 12 identical chapters of ~22,500 characters
    assert len(planned) > 5
    assert len({s.key for s in planned}) == len(planned)
    assert [s.key for s in sections.plan_sections(chapter * 12, 20_000, RECIPE)] == [s.key for s in planned]


@pytest.mark.parametrize("raw", ["0", "-5", "100k", "1.5"])
def test_a_section_size_that_is_not_a_whole_number_of_at_least_one_is_refused_by_name(monkeypatch, raw):
    from ingestion_pipeline.core.settings import load_settings

    monkeypatch.setenv("INGESTION_UNIT_CHARACTERS", raw)
    with pytest.raises(ValueError, match=f"INGESTION_UNIT_CHARACTERS must be a whole number of at least 1, "
                                         f"got '{raw}'"):
        load_settings()
    monkeypatch.setenv("INGESTION_UNIT_CHARACTERS", "250000")
    assert load_settings().limits.unit_characters == 250_000


def test_parts_hold_whole_sections_in_order_and_a_short_last_part_joins_the_one_before():
    from ingestion_pipeline.documents.steps.chunk_parts import cut_into_parts

    planned = [sections.Section(n, n, n + 1, f"k{n}") for n in range(7)]
    parts = cut_into_parts(planned, [30, 30, 30, 30, 30, 30, 5], 60)
    assert [[s.number for s in part] for part in parts] == [[0, 1], [2, 3], [4, 5, 6]]
    assert [s for part in parts for s in part] == planned
    assert cut_into_parts(planned[:2], [100, 100], 60) == [[planned[0]], [planned[1]]]
    assert cut_into_parts(planned[:3], [10, 10, 10], 60) == [planned[:3]]
