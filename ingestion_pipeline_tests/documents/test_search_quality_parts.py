"""The parts of search quality that need no database: the answer judgment, the figures and their intervals, the
question sets (their kinds' overlap with their answers), navigational lines, duplicate folding, languages and the
context line embedded with a chunk."""

import json
from pathlib import Path

import pytest

from ingestion_pipeline.documents.chunking import CONTEXT_TOKENS, Chunk, context_line, document_label, text_hash
from ingestion_pipeline.documents.embedding import default_model_path
from ingestion_pipeline.documents.languages import text_search_configs
from ingestion_pipeline.documents.question_overlap import OVERLAP_BOUNDS, kind_overlaps, overlap
from ingestion_pipeline.documents.search import SearchHit
from ingestion_pipeline.documents.search_eval import (
    Question,
    QuestionSetError,
    answer_rank,
    check_answers_exist,
    figures,
    holds_answer,
    interval,
    load_questions,
    paired_difference,
)
from ingestion_pipeline.documents.search_results import is_navigational, shape_results
from ingestion_pipeline.documents.tokens import load_token_counter

QUESTIONS = Path(__file__).resolve().parents[2] / "benchmarks" / "retrieval" / "questions.jsonl"
ECHO_QUESTIONS = QUESTIONS.with_name("echo.jsonl")


def test_an_answer_is_held_whole_or_cut_at_an_edge_but_not_scattered():
    answer = "We have 36 full-time employees, including executive officers"
    assert holds_answer("EMPLOYEES\nWe have 36 full–time employees, including executive officers, management", answer)
    assert holds_answer("… the end of one chunk: we have 36 full-time employees", answer)  # its first 6 of 9 words
    assert not holds_answer("36 employees; we have officers, full-time and executive", answer)
    assert answer_rank(["nothing", "we have 36 full time employees including executive officers"], answer) == 2
    assert answer_rank(["nothing"], answer) is None


def test_figures_count_ranks_beyond_ten_as_misses():
    f = figures([1, 3, None, 11])
    assert (f.hit_at_1, f.hit_at_3, round(f.mrr_at_10, 4)) == (0.25, 0.5, round((1 + 1 / 3) / 4, 4))


def test_a_bad_question_file_names_its_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "a", "document": "d", "kind": "guess", "language": "en", "question": "?",
                                "answer": "two words"}) + "\n")
    with pytest.raises(QuestionSetError, match="line 1: kind 'guess'"):
        load_questions(path)
    path.write_text("{not json\n")
    with pytest.raises(QuestionSetError, match="line 1: not a question"):
        load_questions(path)


def test_the_project_question_set_covers_every_content_rich_document_in_both_kinds_and_french():
    questions = load_questions(QUESTIONS)
    assert len(questions) >= 200
    assert {"DA-619p.pdf", "handbook-872p.docx", "book-war-and-peace-1225p.txt", "example-10k.html", "fr_olap.pdf",
            "norwich-city.txt", "reliance.pdf", "layout-parser-paper-fast.pdf", "a1977-backus-p21.pdf",
            "example-with-scripts.html"} <= {q.document for q in questions}
    assert {q.kind for q in questions} == {"natural", "lookup"}
    assert sum(q.language == "fr" for q in questions) >= 20
    for kind in ("natural", "lookup"):
        of_kind = [q for q in questions if q.kind == kind]
        assert 0.4 < sum(q.held_out for q in of_kind) / len(of_kind) < 0.6, kind
    assert {q.kind for q in load_questions(ECHO_QUESTIONS)} == {"echo"}


def test_each_kinds_questions_share_few_words_with_their_answers():
    """A question that repeats its answer's words is found by any text search: each kind's mean overlap stays under
    its bound, and the echo questions are what the bound keeps out."""
    means = kind_overlaps(load_questions(QUESTIONS))
    for kind, bound in OVERLAP_BOUNDS.items():
        assert means[kind] <= bound, f"{kind} questions share {means[kind]:.3f} of their words with answers (> {bound})"
    assert kind_overlaps(load_questions(ECHO_QUESTIONS))["echo"] > OVERLAP_BOUNDS["lookup"]


def test_overlap_counts_a_questions_content_words_found_in_its_answer():
    answer = "We have 36 full-time employees, including executive officers"
    assert overlap("How many full-time employees does the company have?", answer) == 3 / 4  # all but "company"
    assert overlap("What size is the permanent workforce?", answer) == 0.0
    assert overlap("What is it?", answer) == 0.0  # no content word at all
    assert overlap("Combien d'employés à plein temps ?", "36 employés à plein temps") == 1.0  # French stop words
    drifting = [Question("a", "d", "natural", "en", "How many full-time employees?", answer),
                Question("b", "d", "natural", "en", "What size is the workforce?", answer)]
    assert kind_overlaps(drifting)["natural"] > OVERLAP_BOUNDS["natural"]


def test_question_files_written_with_the_earlier_kinds_are_still_read(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"q{i}", "document": "d", "kind": kind, "language": "en",
                                          "question": "?", "answer": "two words"})
                              for i, kind in enumerate(("paraphrased", "keyword", "natural", "lookup", "echo"))))
    assert [q.kind for q in load_questions(path)] == ["paraphrased", "keyword", "natural", "lookup", "echo"]


def test_intervals_are_seeded_hold_the_figure_and_narrow_with_more_questions():
    ranks = [1, 2, None, 3, 7, 1, None, 1, 4, 2] * 3
    low, high = interval(ranks, "hit@3")
    assert interval(ranks, "hit@3") == (low, high)
    assert low < figures(ranks).hit_at_3 < high
    wide = interval(ranks[:10], "mrr@10")
    narrow = interval(ranks * 10, "mrr@10")
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
    assert interval([1] * 20, "hit@1") == (1.0, 1.0)


def test_a_paired_difference_is_zero_for_the_same_ranks_and_signed_for_better_ones():
    ranks = [1, 5, None, 2, 3, None, 1, 8]
    assert paired_difference(ranks, ranks, "hit@3") == (0.0, 0.0, 0.0)
    better = [1 if r is None or r > 3 else r for r in ranks]
    d, low, high = paired_difference(better, ranks, "hit@3")
    assert d == 4 / 8 and 0 < low <= d <= high
    with pytest.raises(ValueError, match="same questions"):
        paired_difference(ranks, ranks[:-1], "hit@3")


def test_every_answer_of_the_question_sets_is_a_span_of_its_document(corpus_dir):
    from ingestion_pipeline.documents.extraction import extract

    questions = load_questions(QUESTIONS) + load_questions(ECHO_QUESTIONS)
    texts = {}
    for name in sorted({q.document for q in questions}):
        path = corpus_dir / "documents" / name
        texts[name] = "\n".join(el.text for el in extract(path, path.suffix).elements)
    assert check_answers_exist(questions, texts) == []


@pytest.mark.parametrize("text", [
    "MAIN GAME ........................6\nCREATURES ....................6\nAbomination ...........6",
    "A. PURPOSE1-1\nB. ROLE OF UNITED STATES TRUSTEE1-1\nC. STATUTORY DUTIES2-4\nD. PLEDGE OF EXCELLENCE1-4",
    "Risk factors 11\nProperties 19\nLegal proceedings 20\nMine safety disclosures 20",
])
def test_tables_of_contents_are_navigational(text):
    assert is_navigational(text)


def test_prose_with_numbers_and_tables_of_figures_are_not_navigational():
    assert not is_navigational("Budget 2026\nItem | Amount\nLighthouse lamp | 340\nMooring rope | 120\n"
                               "Fog bell | 75\nPaint | 60")
    assert not is_navigational("We have 36 full-time employees. Revenue grew 12 percent in 2021 to $ 21.3 million, "
                               "and the tax rate was 2.25 percent.\nSee Note 10.")


def _hit(chunk_id: int, text: str, **kw) -> SearchHit:
    return SearchHit(chunk_id=chunk_id, score=1.0 / chunk_id, vector_rank=chunk_id, text_rank=None, doc_id=1,
                     title="t", filename="t.pdf", source_uri="upload://x", version_number=1, page_start=chunk_id,
                     page_end=chunk_id, section_path=[], text=text, **kw)


def test_duplicates_fold_into_the_first_and_navigational_hits_go_last():
    passage = "The standing trustee may not advertise in newspapers or other public information media at all."
    hits = [_hit(1, "Contents\nAdvertising ....... 4\nBudget ....... 5\nReview ....... 6"), _hit(2, passage),
            _hit(3, passage.replace("at all.", "at all")), _hit(4, "Something else entirely, about budgets.")]
    shaped = shape_results(hits, 3)
    assert [h.chunk_id for h in shaped] == [2, 4, 1]
    assert shaped[0].also_in == ["t (v1, p. 3)"] and shaped[2].navigational
    assert [h.chunk_id for h in shape_results(hits, 4, collapse=False, demote=False)] == [1, 2, 3, 4]


def test_each_chunk_is_indexed_in_its_language_and_short_ones_in_the_files():
    configs = text_search_configs([
        "Dans cet article, nous développons les travaux entrepris sur le résumé de log de requêtes OLAP.",
        "QSL",
        "Ce papier est organisé comme suit. La section suivante motive et présente notre approche.",
        "The standing trustee must submit to the United States Trustee a monthly report on a cash basis.",
    ])
    assert configs == ["french", "french", "french", "english"]
    korean = "한국어 텍스트는 포스트그레스에 형태소 분석기가 없어 단어 그대로 색인됩니다. " * 3
    assert text_search_configs([korean]) == ["simple"]


def test_the_context_line_names_the_document_and_nearest_headings_within_its_budget():
    counter = load_token_counter(default_model_path())
    assert document_label(None, "handbook-872p.docx") == "handbook 872p"
    assert document_label("Annual report", "ar.pdf") == "Annual report"
    line = context_line("handbook 872p", ["Chapter 3", "B. Meeting of creditors", "9. Fifth amendment"], counter)
    assert line == "handbook 872p > B. Meeting of creditors > 9. Fifth amendment"
    assert counter.count(context_line("x", ["word " * 200], counter)) <= CONTEXT_TOKENS
    chunk = Chunk(0, "text", 1, None, None, [], [])
    chunk.with_context(line)
    assert chunk.content_hash == text_hash(line + "\ntext") != text_hash("text")
