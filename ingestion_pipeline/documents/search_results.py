"""What a person gets back from a search: one hit per passage, passages before the lines that point to them.

- A passage repeated in a document (or across documents) is one hit: a later hit whose words are the same, or
  whose word trigrams overlap an earlier one's by ``NEAR_DUPLICATE`` or more, is folded into it, its citation
  listed in ``also_in``.
- A table of contents, an index or a run of dot-leader lines ("Risk factors ........ 11") names a section
  without saying anything about it: such hits keep their order among themselves but come after every passage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, TypeVar


class _Hit(Protocol):
    """What shaping reads and writes of a hit (``search.SearchHit``)."""

    text: str
    navigational: bool
    also_in: list[str]

    def citation(self) -> str: ...


Hit = TypeVar("Hit", bound=_Hit)

NEAR_DUPLICATE = 0.8  # Jaccard similarity of word trigrams
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_DOT_LEADER = re.compile(r"(?:\.\s?){4,}|…{2,}|(?:_\s?){5,}")
# a line that ends in a page reference: "... 11", "Purpose 1-1", "Preface iii"
_PAGE_REFERENCE = re.compile(r"(?:\d{1,4}|\d{1,3}\s?[-–]\s?\d{1,3}|\b[ivxlc]{1,6})\s*$", re.IGNORECASE)


def is_navigational(text: str) -> bool:
    """A table of contents, an index, or dot leaders: three leaders or more, or most of at least four short
    lines (table rows aside) ending in a page reference."""
    if len(_DOT_LEADER.findall(text)) >= 3:
        return True
    # a table row ("Lighthouse lamp | 340") ends in a figure too, but it is the data, not a pointer to it
    lines = [line.strip() for line in text.split("\n") if line.strip() and " | " not in line]
    if len(lines) < 4 or sum(len(line) for line in lines) / len(lines) > 90:
        return False
    return sum(bool(_PAGE_REFERENCE.search(line)) for line in lines) >= 0.6 * len(lines)


def _trigrams(text: str) -> set[tuple[str, ...]]:
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i:i + 3]) for i in range(max(len(words) - 2, 1))}


def _similar(a: set, b: set) -> bool:
    # Jaccard >= NEAR_DUPLICATE needs the smaller set to be at least that share of the larger: most pairs end here
    if not a or not b or min(len(a), len(b)) < NEAR_DUPLICATE * max(len(a), len(b)):
        return False
    return len(a & b) >= NEAR_DUPLICATE * len(a | b)


def shape_results(hits: Sequence[Hit], k: int, *, collapse: bool = True, demote: bool = True) -> list[Hit]:
    """The first ``k`` of ``hits`` (best first) once duplicates are folded and navigational hits demoted.
    Hits are read only until ``k`` passages are kept: the rest could not be shown."""
    kept: list[Hit] = []
    shingles: list[set] = []
    passages = 0
    for hit in hits:
        hit.navigational = is_navigational(hit.text)
        if collapse:
            grams = _trigrams(hit.text)
            twin = next((i for i, other in enumerate(shingles) if _similar(grams, other)), None)
            if twin is not None:
                kept[twin].also_in.append(hit.citation())
                continue
            shingles.append(grams)
        kept.append(hit)
        passages += not (demote and hit.navigational)
        if passages == k:
            break
    if demote:
        kept = [h for h in kept if not h.navigational] + [h for h in kept if h.navigational]
    return kept[:k]
