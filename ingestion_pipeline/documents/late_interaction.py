"""Late interaction: a search's best candidates ranked again by how well each of the query's tokens finds its
match among the passage's tokens (MaxSim, as ColBERT scores), with the model's own token vectors.

Why: one vector per chunk is the mean of its tokens, so a question asked in other words than the passage's is
compared with an average in which the few tokens that answer it are diluted by the rest. Compared token by token,
each of the question's tokens meets the passage's token nearest in meaning. The model computes every token's
vector anyway to pool the chunk's; keeping them costs no inference at ingest, only storage.

Each chunk's token vectors ([CLS] and [SEP] aside) are kept as their signs: one bit a dimension (48 bytes a
token for a 384-dimension model). The query's tokens stay in full precision, so a passage token's score is the
query token's vector against the sign vector scaled to unit length. Which representation, which candidates and
how they are ranked: measured on the project's question set (benchmarks/retrieval_quality.py; the comparison of
kept bits in docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache

import numpy as np


def token_matrix(hidden: np.ndarray, length: int) -> np.ndarray:
    """One text's token vectors from the model's last hidden state (tokens, dimension), its ``length`` real tokens
    of which the first and last are [CLS] and [SEP]: the others, each L2-normalised (float32)."""
    tokens = np.asarray(hidden[1:max(1, length - 1)], dtype=np.float32)
    if len(tokens) == 0:  # an empty text: its [CLS] stands for it
        tokens = np.asarray(hidden[:1], dtype=np.float32)
    return tokens / np.clip(np.linalg.norm(tokens, axis=1, keepdims=True), 1e-12, None)


def pack(tokens: np.ndarray) -> bytes:
    """A passage's token vectors as stored: each vector's signs, one bit a dimension, row after row."""
    return np.packbits(np.asarray(tokens) > 0, axis=1).tobytes()


@cache
def _byte_signs(dimension: int) -> np.ndarray:
    """Each byte value's eight bits as components of a unit vector of ``dimension``: +-1/sqrt(dimension),
    float32 (a table lookup decodes a byte in one step)."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float32)
    return (bits * 2 - 1) * np.float32(1 / math.sqrt(dimension))


def unpack(stored: bytes, dimension: int) -> np.ndarray:
    """``pack``'s bits as unit vectors (tokens, dimension), float32: each component +-1/sqrt(dimension)."""
    if dimension % 8 or not stored or len(stored) % (dimension // 8):
        raise ValueError(f"{len(stored)} bytes are not token vectors of dimension {dimension}")
    return _byte_signs(dimension)[np.frombuffer(stored, dtype=np.uint8)].reshape(-1, dimension)


def maxsim(query_tokens: np.ndarray, passage_tokens: np.ndarray) -> float:
    """The mean, over the query's tokens, of each one's best dot product with a passage token."""
    return float((query_tokens @ passage_tokens.T).max(axis=1).mean())


def scores(query_tokens: np.ndarray, stored: Mapping[int, bytes], dimension: int) -> dict[int, float]:
    """Each chunk's MaxSim score from its stored token vectors (one product over all of them)."""
    if not stored:
        return {}
    chunk_ids = list(stored)
    row_bytes = dimension // 8
    for chunk_id in chunk_ids:
        if dimension % 8 or not stored[chunk_id] or len(stored[chunk_id]) % row_bytes:
            raise ValueError(f"chunk {chunk_id}: {len(stored[chunk_id])} bytes are not token vectors of dimension "
                             f"{dimension}")
    starts = np.cumsum([0] + [len(stored[c]) // row_bytes for c in chunk_ids[:-1]])
    passages = unpack(b"".join(stored[c] for c in chunk_ids), dimension)  # every chunk's tokens, decoded at once
    query = np.asarray(query_tokens, dtype=np.float32)
    best = np.maximum.reduceat(query @ passages.T, starts, axis=1)  # (query tokens, chunks)
    return dict(zip(chunk_ids, best.mean(axis=0).tolist(), strict=True))


def rerank(order: Sequence[int], query_tokens: np.ndarray, stored: Mapping[int, bytes],
           dimension: int) -> list[tuple[int, float]] | None:
    """``order``'s chunks with their MaxSim scores, best first (ties keep their order); None when a chunk of it has
    no stored token vectors of the query's model (a version embedded before they were kept, or under another
    model): the fused order then stands, rather than one ranking some chunks by one measure and the rest by
    another."""
    if any(chunk_id not in stored for chunk_id in order):
        return None
    by_score = scores(query_tokens, {c: stored[c] for c in order}, dimension)
    position = {chunk_id: i for i, chunk_id in enumerate(order)}
    return sorted(((c, by_score[c]) for c in order), key=lambda item: (-item[1], position[item[0]]))
