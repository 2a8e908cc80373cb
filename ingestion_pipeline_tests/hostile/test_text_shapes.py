"""Text shaped to slip past the limits: one giant "word" (the tokenizer counts it as one unknown token: it
became one 19 MB chunk of "1 token"), and Markdown nested past the parser's limit (a 2,000-level list kept 9
of its 2,000 items while the file "succeeded")."""

import pytest

from ingestion_pipeline.documents.chunking import MAX_CHUNK_CHARS, TooManyTokens, chunk_elements, effective_budgets
from ingestion_pipeline.documents.extraction.elements import Element, Kind
from ingestion_pipeline.documents.extraction.markdown import extract_markdown
from ingestion_pipeline_tests.helpers import shared_embedder


def test_a_giant_word_is_split_into_bounded_chunks():
    counter = shared_embedder().token_counter
    target, hard_max = effective_budgets(200, 256, counter)
    word = "".join(chr(97 + i % 26) for i in range(150_000))
    chunks = chunk_elements([Element(Kind.NARRATIVE_TEXT, f"Before. {word} After.")], counter, target=target,
                            hard_max=hard_max)
    assert len(chunks) > 100
    assert max(len(c.text) for c in chunks) <= MAX_CHUNK_CHARS
    assert all(c.token_count == counter.count(c.text) <= hard_max for c in chunks)
    assert "".join(c.text.replace(" ", "").replace("\n", "") for c in chunks) == f"Before.{word}After."


def test_prose_is_chunked_as_before():
    counter = shared_embedder().token_counter
    target, hard_max = effective_budgets(200, 256, counter)
    text = "The ferry leaves at seven and arrives at nine. " * 40
    [chunk, *rest] = chunk_elements([Element(Kind.NARRATIVE_TEXT, text)], counter, target=target, hard_max=hard_max)
    assert chunk.text.startswith("The ferry leaves at seven") and "  " not in chunk.text and len(rest) >= 1


def test_markdown_nested_past_the_parser_limit_keeps_every_line(tmp_path):
    deep = tmp_path / "deep.md"
    deep.write_text("".join("  " * i + f"- item {i}\n" for i in range(2000)))
    document = extract_markdown(deep)
    text = " ".join(element.text for element in document.elements)
    assert all(f"item {i} " in text + " " for i in range(2000))
    assert document.notes == ["Markdown nested more than 20 levels deep (1,991 line(s) the parser would drop): "
                              "read as plain paragraphs"]
    shallow = tmp_path / "shallow.md"
    shallow.write_text("# Title\n\n" + "".join("  " * i + f"- item {i}\n" for i in range(8)))
    assert extract_markdown(shallow).notes == []


def test_counting_stops_at_the_token_limit_before_chunking(monkeypatch):
    """A file over ``INGESTION_MAX_TOKENS_PER_FILE`` is refused after the batch of text that passes the limit,
    not after all of it is counted and chunked (a 20 M-character text took minutes before its refusal)."""
    counter = shared_embedder().token_counter
    target, hard_max = effective_budgets(200, 256, counter)
    counted: list[int] = []
    count_many = counter.count_many
    monkeypatch.setattr(counter, "count_many", lambda texts: counted.append(len(texts)) or count_many(texts))
    paragraph = "The ferry leaves at seven and arrives at nine, weather permitting. " * 20
    elements = [Element(Kind.NARRATIVE_TEXT, paragraph) for _ in range(5_000)]  # ~6.7 M characters
    with pytest.raises(TooManyTokens) as refused:
        chunk_elements(elements, counter, target=target, hard_max=hard_max, max_tokens=100_000)
    assert refused.value.counted > 100_000 and "more than 100,000 tokens" in str(refused.value)
    assert sum(counted) < len(elements) / 2  # stopped early: most of the text was never counted
