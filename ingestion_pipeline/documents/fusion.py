"""How search's two rankings become one: each arm's candidates, with their scores, fused into one ordered list.

A question in plain words ("What fee did the club pay to get him?") is answered by meaning: its words are mostly
not the passage's, and what the text arm ranks for it is noise that, given an equal vote, pushes the vector arm's
finds down. A query holding an exact term — a quoted phrase, a number, a name or acronym written in capitals
inside the sentence — is one whose words the passage holds, where the text arm is the stronger. So each query's
weights follow ``exact_terms``:

- ``rrf``: weighted reciprocal rank fusion, score = w_v / (k + vector rank) + w_t / (k + text rank), with the text
  weight of a plain-words query (``plain_text_weight``) apart from an exact-term query's (``text_weight``);
- ``convex``: a convex combination of each arm's scores normalised to [0, 1] over its candidates (min-max),
  ``vector_share`` of the vector arm's for a plain-words query, ``exact_vector_share`` for an exact-term query; a
  chunk one arm did not bring scores 0 there, as its weakest candidate does.

Which fusion and which weights serve: measured on the project's natural and lookup questions
(benchmarks/retrieval_quality.py --sweep).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_QUOTED = re.compile(r"\"[^\"]+\"|“[^”]+”|«[^»]+»")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_SENTENCE_END = re.compile(r"[.!?:;]$")


@dataclass(frozen=True)
class Fused:
    chunk_id: int
    score: float
    vector_rank: int | None
    text_rank: int | None


def exact_terms(query: str) -> list[str]:
    """The query's exact terms: quoted phrases, words holding a digit, and words written with a capital that
    neither open the query or a sentence of it nor are "I" (names, acronyms, titles). Empty for a question in
    plain words."""
    terms = [m.group(0).strip("\"“”«» ") for m in _QUOTED.finditer(query)]
    rest = _QUOTED.sub(" ", query)
    opening = True
    for token in rest.split():
        for word in _WORD.findall(token):
            named = word[0].isupper() and not opening and word != "I"
            if named or any(ch.isdigit() for ch in word):
                terms.append(word)
            opening = False
        if _SENTENCE_END.search(token):
            opening = True
    return terms


def reciprocal_rank(vector: Sequence[tuple[int, float]], text: Sequence[tuple[int, float]], *, k: int,
                    vector_weight: float, text_weight: float) -> list[Fused]:
    """Weighted reciprocal rank fusion of the arms' candidates (best first in each); best first."""
    ranks: dict[int, list[int | None]] = {}
    for rank, (chunk_id, _) in enumerate(vector, start=1):
        ranks.setdefault(chunk_id, [None, None])[0] = rank
    for rank, (chunk_id, _) in enumerate(text, start=1):
        ranks.setdefault(chunk_id, [None, None])[1] = rank
    fused = [Fused(chunk_id, (vector_weight / (k + v) if v else 0.0) + (text_weight / (k + t) if t else 0.0), v, t)
             for chunk_id, (v, t) in ranks.items()]
    return sorted(fused, key=lambda f: (-f.score, f.chunk_id))


def convex(vector: Sequence[tuple[int, float]], text: Sequence[tuple[int, float]], *,
           vector_share: float) -> list[Fused]:
    """``vector_share`` of each chunk's normalised vector score plus the rest of its normalised text score; best
    first. Scores are normalised per arm over its candidates (the best 1, the weakest 0; one candidate alone 1)."""
    vector_scores, text_scores = _normalised(vector), _normalised(text)
    vector_ranks = {chunk_id: rank for rank, (chunk_id, _) in enumerate(vector, start=1)}
    text_ranks = {chunk_id: rank for rank, (chunk_id, _) in enumerate(text, start=1)}
    fused = [Fused(chunk_id, vector_share * vector_scores.get(chunk_id, 0.0)
                   + (1 - vector_share) * text_scores.get(chunk_id, 0.0),
                   vector_ranks.get(chunk_id), text_ranks.get(chunk_id))
             for chunk_id in vector_scores.keys() | text_scores.keys()]
    return sorted(fused, key=lambda f: (-f.score, f.chunk_id))


def _normalised(scored: Sequence[tuple[int, float]]) -> dict[int, float]:
    if not scored:
        return {}
    high = max(s for _, s in scored)
    low = min(s for _, s in scored)
    if high <= low:
        return {chunk_id: 1.0 for chunk_id, _ in scored}
    return {chunk_id: (s - low) / (high - low) for chunk_id, s in scored}
