"""Fusing the two arms: which queries hold an exact term, and the two fusions' arithmetic."""

import pytest

from ingestion_pipeline.documents.fusion import convex, exact_terms, reciprocal_rank


@pytest.mark.parametrize(("query", "terms"), [
    ("What fee did the club pay to get him from his old employer?", []),
    ("How far were the rivers from the border?", []),
    ("Why does the author skip the derivation? What is shown instead?", []),  # each sentence opens with a capital
    ("I wonder how long the suspension lasted", []),
    ("When did Roberts join Gillingham?", ["Roberts", "Gillingham"]),
    ("What does FAR Part 15 require?", ["FAR", "Part", "15"]),
    ('Where is "the blood is the key" written?', ["the blood is the key"]),
    ("Quel est le rôle de l'opérateur « union » dans ce cadre ?", ["union"]),
    ("how many employees in 2021", ["2021"]),
    ("Gillingham transfer fee", []),  # the opening word alone: a plain query typed with a capital
])
def test_exact_terms_are_quoted_phrases_numbers_and_names_inside_a_sentence(query, terms):
    assert exact_terms(query) == terms


def test_reciprocal_rank_fusion_adds_each_arms_weighted_reciprocal_rank():
    fused = reciprocal_rank([(1, 0.9), (2, 0.8)], [(2, 12.0), (3, 4.0)], k=60, vector_weight=1.0, text_weight=0.5)
    assert [f.chunk_id for f in fused] == [2, 1, 3]
    assert fused[0].score == pytest.approx(1 / 62 + 0.5 / 61)
    assert (fused[0].vector_rank, fused[0].text_rank) == (2, 1)
    assert (fused[2].vector_rank, fused[2].text_rank) == (None, 2)
    assert [f.chunk_id for f in reciprocal_rank([], [(5, 1.0)], k=60, vector_weight=1, text_weight=0)] == [5]


def test_convex_fusion_mixes_scores_normalised_per_arm():
    vector = [(1, 0.80), (2, 0.60), (3, 0.40)]  # normalised 1, 0.5, 0
    text = [(3, 30.0), (4, 10.0)]  # normalised 1, 0
    fused = {f.chunk_id: f for f in convex(vector, text, vector_share=0.6)}
    assert fused[1].score == pytest.approx(0.6)
    assert fused[2].score == pytest.approx(0.3)
    assert fused[3].score == pytest.approx(0.4)  # the weakest vector, the best text
    assert fused[4].score == pytest.approx(0.0)
    assert [f.chunk_id for f in convex(vector, text, vector_share=0.6)] == [1, 3, 2, 4]
    # a text score far above the rest does not outweigh its share: only the order within an arm counts
    assert convex(vector, [(3, 1e6), (4, 1.0)], vector_share=0.6)[0].chunk_id == 1
    assert [(f.chunk_id, f.score) for f in convex([(7, 0.5)], [], vector_share=0.6)] == [(7, 0.6)]
    assert convex([], [], vector_share=0.6) == []
