"""Chunking with the embedding model's real tokenizer: budgets, structure, and the hard cap."""

from pathlib import Path

import pytest

from ingestion_pipeline.documents.chunking import chunk_elements, effective_budgets
from ingestion_pipeline.documents.embedding import default_model_path
from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.extraction.elements import (
    LIST_ITEM,
    NARRATIVE_TEXT,
    TABLE,
    TITLE,
    Element,
    assign_section_paths,
)
from ingestion_pipeline.documents.tokens import load_token_counter


@pytest.fixture(scope="module")
def counter():
    return load_token_counter(default_model_path())


def _elements(*items: Element) -> list[Element]:
    return list(assign_section_paths(items))


def test_budgets_are_clamped_to_the_model(counter):
    assert counter.max_content_tokens == 254  # all-MiniLM-L6-v2: 256 minus [CLS] and [SEP]
    assert effective_budgets(200, 10_000, counter) == (200, 254)
    assert effective_budgets(500, 500, counter) == (254, 254)


@pytest.mark.parametrize("name", ["book-war-and-peace-1225p.txt", "handbook-872p.docx", "example-10k.html"])
def test_no_chunk_exceeds_the_model_max_sequence_length(counter, corpus_dir, name):
    path = corpus_dir / "documents" / name
    document = extract(path, path.suffix)
    chunks = chunk_elements(document.elements, counter, target=200, hard_max=254)
    recount = counter.count_many([c.text for c in chunks])
    assert max(recount) <= 254
    assert [c.token_count for c in chunks] == recount
    # Nothing is lost: every word of the source is in some chunk (spot-check a sample).
    words = {w for e in document.elements for w in e.text.split()[:3]}
    joined = "\n".join(c.text for c in chunks)
    assert all(w in joined for w in list(words)[:500])


def test_titles_start_sections_and_travel_with_their_text(counter):
    elements = _elements(
        Element(TITLE, "Introduction", 1, level=1),
        Element(NARRATIVE_TEXT, "Short intro.", 1),
        Element(TITLE, "Methods", 2, level=1),
        Element(TITLE, "Sampling", 2, level=2),
        Element(NARRATIVE_TEXT, "We sampled things.", 3),
    )
    chunks = chunk_elements(elements, counter, target=200, hard_max=254)
    assert [c.text for c in chunks] == ["Introduction\nShort intro.", "Methods\nSampling\nWe sampled things."]
    assert chunks[1].section_path == ["Methods", "Sampling"]
    assert (chunks[1].page_start, chunks[1].page_end) == (2, 3)


def test_tables_and_list_items_stay_whole(counter):
    table = "\n".join(f"row {i} | value {i} | note {i}" for i in range(12))
    prose = "Some prose sentence here. " * 25
    elements = _elements(
        Element(NARRATIVE_TEXT, prose, 1),
        Element(TABLE, table, 1),
        Element(LIST_ITEM, "first item of the list", 1),
    )
    chunks = chunk_elements(elements, counter, target=120, hard_max=254)
    assert sum(table in c.text for c in chunks) == 1
    assert sum("first item of the list" in c.text for c in chunks) == 1


def test_long_prose_splits_at_sentence_ends(counter):
    text = " ".join(f"Sentence number {i} says something short." for i in range(200))
    chunks = chunk_elements(_elements(Element(NARRATIVE_TEXT, text, 1)), counter, target=100, hard_max=254)
    assert len(chunks) > 5
    assert all(c.token_count <= 100 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)


def test_oversized_table_is_split_by_rows_within_cap_repeating_its_header(counter):
    header = "Pier | Tonnes | Cargo"
    table = "\n".join([header] + [f"row {i} | " + "cell " * 20 for i in range(60)])
    chunks = chunk_elements(_elements(Element(TABLE, table, 4)), counter, target=200, hard_max=254)
    assert len(chunks) > 1 and all(c.token_count <= 254 for c in chunks)
    parts = [c.text.split("\n") for c in chunks]
    assert all(p[0] == header and p[1].startswith("row ") for p in parts)  # every part: the header, then rows
    rows = [line for p in parts for line in p[1:]]
    assert rows == table.split("\n")[1:]  # every row once, in order


def test_chunk_carries_hash_and_ordinals(counter, corpus_dir):
    path = Path(corpus_dir / "documents" / "fr_olap.pdf")
    chunks = chunk_elements(extract(path, ".pdf").elements, counter, target=200, hard_max=254)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert all(len(c.content_hash) == 64 and c.page_start for c in chunks)


def test_the_models_tokenizer_counts_text_joined_at_whitespace_as_the_sum_of_its_parts(counter, corpus_dir):
    """What lets chunking add its pieces' counts instead of encoding every chunk again (``TokenCounter.additive``)."""
    assert counter.additive
    path = corpus_dir / "documents" / "example-10k.html"
    texts = [e.text for e in extract(path, path.suffix).elements][:400]
    for size in (2, 5, 17):
        groups = [texts[i:i + size] for i in range(0, len(texts), size)]
        joined = counter.count_many(["\n".join(g) for g in groups])
        assert joined == [sum(counter.count_many(g)) for g in groups]


def test_pieces_cut_inside_a_word_are_counted_again(counter):
    # a 68-letter "word" of WordPiece tokens cut between two of them: the next piece starts mid-word and
    # re-tokenizes otherwise (here into 6 tokens, not the 5 between the cuts)
    text = f"A sentence before. {'supercalifragilisticexpialidocious' * 2} and after."
    pieces = counter.split_counted(text, 5)
    assert [n for _, n in pieces] == counter.count_many([p for p, _ in pieces])
    assert max(n for _, n in pieces) == 6


def test_a_tokenizer_whose_counts_do_not_add_up_has_every_chunk_counted_whole(counter, corpus_dir):
    from tokenizers import Tokenizer, pre_tokenizers

    from ingestion_pipeline.documents.tokens import TokenCounter

    tokenizer = Tokenizer.from_str(counter._tokenizer.to_str())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()  # SentencePiece's: words keep their leading space
    other = TokenCounter(tokenizer, 256)
    assert not other.additive
    path = corpus_dir / "documents" / "example-10k.html"
    chunks = chunk_elements(extract(path, path.suffix).elements, other, target=120, hard_max=200)
    assert [c.token_count for c in chunks] == other.count_many([c.text for c in chunks])
    assert max(c.token_count for c in chunks) <= 200


def test_an_edit_changes_the_chunks_near_it_not_every_chunk_after_it(counter):
    """A revision reuses the stored vector of every chunk whose text is unchanged, so what a revision costs is how
    far an edit moves chunk boundaries. In prose without a heading to start over at, packing paragraphs up to the
    target meets the old boundaries again a few chunks after the edit (benchmarks/chunk_boundaries.py measures it
    on the corpus's large documents)."""
    import random
    from collections import Counter

    rng = random.Random(11)
    words = ["harbour", "ferry", "winter", "channel", "budget", "tide", "council", "vote", "pilot", "cargo",
             "quay", "lock", "storm", "repair", "levy"]
    paragraphs = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 120))).capitalize() + "."
                  for _ in range(300)]

    def chunk_texts(texts: list[str]) -> list[str]:
        elements = _elements(*(Element(NARRATIVE_TEXT, t, 1 + i // 5) for i, t in enumerate(texts)))
        return [c.text for c in chunk_elements(elements, counter, target=200, hard_max=254)]

    before = chunk_texts(paragraphs)
    revised = list(paragraphs)
    revised[20] += " A sentence added in the revision, some twenty words long, that the first version did not have."
    del revised[150]
    after = chunk_texts(revised)
    new = sum((Counter(after) - Counter(before)).values())  # chunks whose text the first version lacks
    assert len(before) > 100 and 2 <= new <= 10, (len(before), new)
    assert after[-len(before) // 3:] == before[-len(before) // 3:]  # the last third untouched


def test_counting_without_offsets_gives_the_full_encodings_counts(counter, corpus_dir):
    """``count_many`` encodes without character offsets; each count is the full encoding's, on every script and
    shape the corpus has (prose, tables, Korean, French, code, UTF-16 text)."""
    texts = [e.text for name in sorted((corpus_dir / "documents").iterdir())
             if name.suffix in (".txt", ".md", ".html") for e in extract(name, name.suffix).elements[:300]]
    full = [len(e.ids) for e in counter._tokenizer.encode_batch(texts, add_special_tokens=False)]
    assert len(texts) > 1000 and counter.count_many(texts) == full
