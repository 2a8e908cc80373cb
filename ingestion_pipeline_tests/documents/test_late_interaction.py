"""Late interaction: token vectors kept as signs, MaxSim scores, the rerank and its fallback, and every runtime's
token vectors of a text alike."""

import numpy as np
import pytest

from ingestion_pipeline.documents.late_interaction import maxsim, pack, rerank, scores, token_matrix, unpack
from ingestion_pipeline_tests.helpers import shared_embedder


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_packed_tokens_keep_each_components_sign_in_one_bit_as_unit_vectors():
    rng = np.random.default_rng(1)
    tokens = _unit(rng.standard_normal((7, 384)).astype(np.float32))
    stored = pack(tokens)
    assert len(stored) == 7 * 384 // 8  # 48 bytes a token
    back = unpack(stored, 384)
    assert back.shape == (7, 384)
    assert np.array_equal(back > 0, tokens > 0)
    assert np.allclose(np.linalg.norm(back, axis=1), 1.0)
    with pytest.raises(ValueError, match="not token vectors of dimension 384"):
        unpack(stored[:-1], 384)
    with pytest.raises(ValueError, match="not token vectors"):
        unpack(b"", 384)


def test_token_matrix_drops_cls_sep_and_padding_and_normalises():
    hidden = np.arange(5 * 4, dtype=np.float32).reshape(5, 4) + 1  # [CLS] a b [SEP] [PAD]
    tokens = token_matrix(hidden, 4)
    assert tokens.shape == (2, 4)
    assert np.allclose(tokens, _unit(hidden[1:3]))
    assert token_matrix(hidden, 2).shape == (1, 4)  # an empty text: its [CLS] stands for it


def test_maxsim_gives_each_query_token_its_best_passage_token():
    query = np.eye(3, dtype=np.float32)[:2]  # two tokens: axes 0 and 1
    passage = np.array([[1, 0, 0], [0, 0.6, 0.8]], dtype=np.float32)
    assert maxsim(query, passage) == pytest.approx((1.0 + 0.6) / 2)


def test_scores_of_several_chunks_are_each_chunks_own_maxsim():
    rng = np.random.default_rng(2)
    query = _unit(rng.standard_normal((4, 64)).astype(np.float32))
    chunks = {i: _unit(rng.standard_normal((n, 64)).astype(np.float32)) for i, n in ((10, 3), (11, 9), (12, 1))}
    stored = {i: pack(t) for i, t in chunks.items()}
    got = scores(query, stored, 64)
    for i in chunks:
        assert got[i] == pytest.approx(maxsim(query, unpack(stored[i], 64)), abs=1e-6)


def test_rerank_orders_by_maxsim_and_gives_up_when_a_candidate_has_no_token_vectors():
    query = np.array([[1.0, 0, 0, 0, 0, 0, 0, 0]], dtype=np.float32)
    near = np.array([[1.0, -1, -1, -1, -1, -1, -1, -1]])  # sign vector closest to the query's token
    far = -near
    stored = {1: pack(far), 2: pack(near), 3: pack(far)}
    ranked = rerank([1, 2, 3], query, stored, 8)
    assert [c for c, _ in ranked] == [2, 1, 3]  # ties keep the fused order
    assert ranked[0][1] > ranked[1][1] == ranked[2][1]
    assert rerank([1, 2, 4], query, stored, 8) is None


@pytest.mark.integration  # imports torch and loads the model on it: seconds
def test_each_runtime_gives_a_text_the_same_token_vectors_as_sentence_transformers():
    """The exported model's token vectors (what ingest stores and a query is compared with) agree with
    sentence-transformers' token embeddings on torch, sign for sign nearly everywhere, and the pooled vector is
    ``embed``'s."""
    from ingestion_pipeline.documents.torch_encoder import TorchEncoder

    embedder = shared_embedder()
    texts = ["The committee approved the budget for the new river crossing.", "x", "Ein kurzer deutscher Satz."]
    vectors, tokens = embedder.embed_with_tokens(texts)
    assert np.allclose(vectors, embedder.embed(texts), atol=1e-5)
    reference: list[np.ndarray] = []
    TorchEncoder(embedder.model_path).encode(texts, 8, reference)
    for mine, theirs in zip(tokens, reference, strict=True):
        assert mine.shape == theirs.shape
        assert np.mean((mine > 0) == (theirs > 0)) > 0.99
        assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    vector, query_tokens = embedder.embed_query(texts[0])
    assert np.allclose(vector, vectors[0], atol=1e-5) and query_tokens.shape == tokens[0].shape
