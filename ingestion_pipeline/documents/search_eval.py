"""Retrieval quality on a question set: each question's answer is a span of its document's text.

A retrieved passage *holds the answer* when the answer's words appear in it in order (case, punctuation
and spacing aside), or when at least ``EDGE_FRACTION`` of them do at one end of the answer: a passage cut at
the answer's first or last words still points a reader at it. The judgment reads only the passages'
text, so any retriever (ours, a peer's, a plain recipe) is scored the same way, whatever its chunks.

Figures per kind of question and overall: hit@1, hit@3, MRR@10 and known-item nDCG@10 (one answer:
``1 / log2(1 + rank)`` of the first passage holding it), each with a bootstrap 95 % interval over the questions
(``interval``), so that one question's difference is not read as progress.

Kinds (how a question relates to its answer's wording, measured by ``question_overlap.py``):
- ``natural``: asked in the asker's own words, sharing almost no content word with the answer;
- ``lookup``: naming a term, name or figure the asker knows, copying no phrase of the answer;
- ``echo``: repeating much of the answer's wording; reported on its own, never used to choose a setting.
Files written before these kinds (``paraphrased``, ``keyword``) are still read.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

KINDS = ("natural", "lookup", "echo", "paraphrased", "keyword")
CHOOSING_KINDS = ("natural", "lookup")  # the kinds a setting is chosen on
BOOTSTRAP_SAMPLES = 2000
EDGE_FRACTION = 0.6  # of the answer's words, at its start or end, that a passage cut at an edge must hold
_MIN_EDGE_WORDS = 4
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Question:
    id: str
    document: str  # the file the answer is in (its name)
    kind: str  # "natural", "lookup" or "echo" (see the module's docstring)
    language: str
    question: str
    answer: str  # a span of the document's text

    @property
    def held_out(self) -> bool:
        """Every other question is held out: settings are chosen on the others and checked on these."""
        digits = "".join(ch for ch in self.id if ch.isdigit())
        return bool(digits) and int(digits) % 2 == 0


class QuestionSetError(ValueError):
    """A question file that cannot be read (the message names the line)."""


def load_questions(path: Path) -> list[Question]:
    """The questions of a JSON Lines file (one object a line: id, document, kind, language, question, answer)."""
    return parse_questions(Path(path).read_text(encoding="utf-8").splitlines(), str(path))


def parse_questions(lines: Iterable[str], path: str) -> list[Question]:
    """The questions of JSON Lines ``lines``; ``path`` names them in an error (a file, or a pasted set)."""
    questions: list[Question] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            question = Question(**{name: str(record[name]) for name in
                                   ("id", "document", "kind", "language", "question", "answer")})
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise QuestionSetError(f"{path}, line {number}: not a question ({exc})") from exc
        if question.kind not in KINDS:
            raise QuestionSetError(f"{path}, line {number}: kind {question.kind!r} is not one of {', '.join(KINDS)}")
        if len(words(question.answer)) < 2:
            raise QuestionSetError(f"{path}, line {number}: the answer needs at least two words")
        if question.id in seen:
            raise QuestionSetError(f"{path}, line {number}: id {question.id} is used twice")
        seen.add(question.id)
        questions.append(question)
    return questions


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _joined(tokens: Sequence[str]) -> str:
    return " " + " ".join(tokens) + " "


def holds_answer(passage: str, answer: str) -> bool:
    """Whether ``passage`` holds ``answer`` (whole, or its first or last ``EDGE_FRACTION`` of words)."""
    text, span = _joined(words(passage)), words(answer)
    if _joined(span) in text:
        return True
    edge = max(_MIN_EDGE_WORDS, math.ceil(EDGE_FRACTION * len(span)))
    if edge >= len(span):
        return False
    return _joined(span[:edge]) in text or _joined(span[-edge:]) in text


def answer_rank(passages: Sequence[str], answer: str) -> int | None:
    """The 1-based rank of the first passage holding ``answer``; None when none does."""
    for rank, passage in enumerate(passages, start=1):
        if holds_answer(passage, answer):
            return rank
    return None


@dataclass(frozen=True)
class Figures:
    questions: int
    hit_at_1: float
    hit_at_3: float
    mrr_at_10: float
    ndcg_at_10: float

    def as_dict(self) -> dict:
        return {"questions": self.questions, "hit@1": round(self.hit_at_1, 3), "hit@3": round(self.hit_at_3, 3),
                "mrr@10": round(self.mrr_at_10, 3), "ndcg@10": round(self.ndcg_at_10, 3)}


def figures(ranks: Iterable[int | None]) -> Figures:
    """The figures of these answer ranks (None: not in the top 10)."""
    ranks = [r if r is not None and r <= 10 else None for r in ranks]
    n = len(ranks)
    if n == 0:
        return Figures(0, 0.0, 0.0, 0.0, 0.0)
    return Figures(
        n,
        sum(r == 1 for r in ranks) / n,
        sum(r is not None and r <= 3 for r in ranks) / n,
        sum(1 / r for r in ranks if r is not None) / n,
        sum(1 / math.log2(1 + r) for r in ranks if r is not None) / n,
    )


def report(questions: Sequence[Question], ranks: Mapping[str, int | None]) -> dict[str, Figures]:
    """Figures overall, per kind and per language: ``{"all": …, "natural": …, "lookup": …, "lang:fr": …}``."""
    groups: dict[str, list[int | None]] = {"all": []}
    for q in questions:
        rank = ranks.get(q.id)
        for group in ("all", q.kind, f"lang:{q.language}"):
            groups.setdefault(group, []).append(rank)
    return {group: figures(values) for group, values in groups.items()}


def check_answers_exist(questions: Sequence[Question], texts: Mapping[str, str]) -> list[str]:
    """The problems of a question set against its documents' text (``texts``: file name -> text): a document
    that is missing, or an answer that is not a span of it. Empty when every answer is found."""
    joined = {name: _joined(words(text)) for name, text in texts.items()}
    problems = []
    for q in questions:
        if q.document not in joined:
            problems.append(f"{q.id}: no document {q.document!r}")
        elif _joined(words(q.answer)) not in joined[q.document]:
            problems.append(f"{q.id}: the answer is not in {q.document}: {q.answer!r}")
    return problems


_METRICS = {
    "hit@1": lambda r: float(r == 1),
    "hit@3": lambda r: float(r is not None and r <= 3),
    "mrr@10": lambda r: 1 / r if r is not None and r <= 10 else 0.0,
}


def _bootstrap(values: Sequence[float], samples: int, seed: int) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the mean of ``values`` drawn again with replacement ``samples`` times
    (seeded: the same values always give the same interval)."""
    if not values:
        return (0.0, 0.0)
    draw = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[draw.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    return means[int(0.025 * (samples - 1))], means[int(0.975 * (samples - 1))]


def interval(ranks: Sequence[int | None], metric: str, *, samples: int = BOOTSTRAP_SAMPLES,
             seed: int = 0) -> tuple[float, float]:
    """The bootstrap 95 % interval of ``metric`` ("hit@1", "hit@3" or "mrr@10") over these questions' ranks."""
    return _bootstrap([_METRICS[metric](r) for r in ranks], samples, seed)


def paired_difference(ranks_a: Sequence[int | None], ranks_b: Sequence[int | None], metric: str, *,
                      samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """System A's ``metric`` less system B's on the same questions (ranks in the same order), with the paired
    bootstrap 95 % interval of that difference: an interval that holds 0 is no evidence either way."""
    if len(ranks_a) != len(ranks_b):
        raise ValueError("paired ranks must be of the same questions")
    diffs = [_METRICS[metric](a) - _METRICS[metric](b) for a, b in zip(ranks_a, ranks_b, strict=True)]
    low, high = _bootstrap(diffs, samples, seed)
    return (sum(diffs) / len(diffs) if diffs else 0.0), low, high
