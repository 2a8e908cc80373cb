"""How many of a question's words its answer already holds: what separates a question a person asks from one
that echoes its passage.

A question's *content words* are its words lower-cased, less stop words (English and French) and words of two
letters or fewer. Its *overlap* is the share of its distinct content words that occur among its answer span's
words. A keyword search finds a question whose overlap is high whatever else the search does, so a question set
measures retrieval only where its overlap is low; ``kind_overlaps`` gives each kind's mean, and the question set's
test holds each kind under its bound (``OVERLAP_BOUNDS``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

# NLTK's English and French stop word lists, with the words a question is phrased in ("many", "much", "does")
_STOP_WORD_TEXT = """
a about above after again against ain all am an and any are aren aren't as at be because been before being below
between both but by can couldn couldn't d did didn didn't do does doesn doesn't doing don don't down during each
few for from further had hadn hadn't has hasn hasn't have haven haven't having he her here hers herself him
himself his how i if in into is isn isn't it it's its itself just ll m ma me mightn mightn't more most mustn
mustn't my myself needn needn't no nor not now o of off on once only or other our ours ourselves out over own re
s same shan shan't she she's should should've shouldn shouldn't so some such t than that that'll the their theirs
them themselves then there these they this those through to too under until up ve very was wasn wasn't we were
weren weren't what when where which while who whom why will with won won't wouldn wouldn't y you you'd you'll
you're you've your yours yourself yourselves
many much would could might must shall also may get got make made one ones thing things way kind sort something
anything anyone someone else ever there's what's who's how's
au aux avec ce ces dans de des du elle en et eux il ils je la le les leur lui ma mais me même mes moi mon ne nos
notre nous on ou par pas pour qu que qui sa se ses son sur ta te tes toi ton tu un une vos votre vous c d j l à m
n s t y été étée étées étés étant étante étants étantes suis es est sommes êtes sont serai seras sera serons serez
seront serais serait serions seriez seraient étais était étions étiez étaient fus fut fûmes fûtes furent sois soit
soyons soyez soient fusse fusses fût fussions fussiez fussent ayant ayante ayantes ayants eu eue eues eus ai as
avons avez ont aurai auras aura aurons aurez auront aurais aurait aurions auriez auraient avais avait avions
aviez avaient eut eûmes eûtes eurent aie aies ait ayons ayez aient eusse eusses eût eussions eussiez eussent
quel quelle quels quelles quoi comment combien pourquoi quand est-ce cette cet
"""
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())

MIN_WORD_LENGTH = 3
# the most a kind's mean overlap may be: above it, a kind's questions echo their answers
OVERLAP_BOUNDS: Mapping[str, float] = {"natural": 0.10, "lookup": 0.35}


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_words(text: str) -> set[str]:
    """The distinct words of ``text`` that carry its meaning (lower-cased; no stop word, none under 3 letters)."""
    return {w for w in words(text) if len(w) >= MIN_WORD_LENGTH and w not in STOP_WORDS}


def overlap(question: str, answer: str) -> float:
    """The share of the question's content words found among the answer's words (0 for a question of none)."""
    asked = content_words(question)
    if not asked:
        return 0.0
    return len(asked & set(words(answer))) / len(asked)


def kind_overlaps(questions: Iterable) -> dict[str, float]:
    """Each kind's mean overlap (``questions``: anything with ``kind``, ``question`` and ``answer``)."""
    by_kind: dict[str, list[float]] = {}
    for q in questions:
        by_kind.setdefault(q.kind, []).append(overlap(q.question, q.answer))
    return {kind: sum(values) / len(values) for kind, values in sorted(by_kind.items())}
