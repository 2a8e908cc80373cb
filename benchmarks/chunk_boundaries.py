"""How many chunks an edit costs, on the corpus's large documents.

A revised document reuses the stored vector of every chunk whose embedded text is unchanged (``staging.reuse_
stored_embeddings``); a chunk with new text is encoded again. Packing paragraphs into chunks up to a target could
move every boundary after an edit, and a revision near the start of a 600-page manual would then cost the whole
manual; it does not, because the packing meets the old boundaries again (at a heading, or where both versions
close a chunk before the same paragraph). This prints, per document, its chunks and their sizes and, for seeded
random edits (a sentence added to one paragraph; a sentence added to a paragraph of the first half and a
paragraph of the second half deleted), how many chunks of the new version have text the old one did not have.

    .venv/bin/python benchmarks/chunk_boundaries.py [--edits 20] [--documents A,B] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from retrieval_quality import default_corpus  # noqa: E402

DOCUMENTS = ("DA-619p.pdf", "handbook-872p.docx", "book-war-and-peace-1225p.txt", "example-10k.html", "fr_olap.pdf",
             "layout-parser-paper-fast.pdf")


class CachedCounter:
    """The model's token counter with its counts remembered: every setting and edit counts the same paragraphs."""

    def __init__(self, counter) -> None:
        self._counter = counter
        self._counts: dict[str, int] = {}
        self.additive = counter.additive
        self.max_content_tokens = counter.max_content_tokens

    def count_many(self, texts: list[str]) -> list[int]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._counts]
        if missing:
            self._counts.update(zip(missing, self._counter.count_many(missing), strict=True))
        return [self._counts[t] for t in texts]

    def count(self, text: str) -> int:
        return self.count_many([text])[0]

    def split(self, text: str, max_tokens: int) -> list[str]:
        return self._counter.split(text, max_tokens)

    def split_counted(self, text: str, max_tokens: int) -> list[tuple[str, int]]:
        return self._counter.split_counted(text, max_tokens)


ADDED = "This sentence was added in the revision, with about twenty words that the first version did not have."


def edited(elements, grown: list[int], removed: list[int] = ()):
    """The elements with a sentence added to each paragraph of ``grown`` and those of ``removed`` deleted: edits
    that change a paragraph's length, as revisions do (a word swapped for one of the same length moves no
    boundary, whatever the packing)."""
    out = list(elements)
    for i in grown:
        out[i] = replace(out[i], text=f"{out[i].text} {ADDED}")
    return [el for i, el in enumerate(out) if i not in set(removed)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edits", type=int, default=20, help="random edits per document and setting")
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--documents", default=",".join(DOCUMENTS))
    args = parser.parse_args()

    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.documents.chunking import TITLE, chunk_elements, effective_budgets
    from ingestion_pipeline.documents.embedding import default_model_path
    from ingestion_pipeline.documents.extraction import extract
    from ingestion_pipeline.documents.tokens import load_token_counter

    corpus = args.corpus or default_corpus()
    settings = load_settings()
    counter = CachedCounter(load_token_counter(default_model_path()))
    target, hard_max = effective_budgets(settings.chunk.target_tokens, settings.chunk.max_tokens, counter)
    print(f"chunk target {target} tokens, hard cap {hard_max}; {args.edits} edits of one paragraph and "
          f"{args.edits} of two per document", flush=True)

    documents = {}
    for name in args.documents.split(","):
        started = time.perf_counter()
        documents[name] = extract(corpus / name, Path(name).suffix).elements
        print(f"  extracted {name}: {len(documents[name]):,} elements in {time.perf_counter() - started:.1f} s",
              flush=True)

    print(f"\n{'document':<30} {'chunks':>7} {'mean tok':>8} {'<50 tok':>7} "
          f"{'1 edit: new chunks mean/p90/max':>32} {'2 edits: mean/max':>18}")
    for name, elements in documents.items():
        base = chunk_elements(elements, counter, target=target, hard_max=hard_max)
        old = Counter(c.text for c in base)
        paragraphs = [i for i, el in enumerate(elements) if el.type != TITLE and " " in el.text.strip()]
        rng = random.Random(f"{name}:{args.edits}")  # the same edits in every run
        ones, twos = [], []
        for _ in range(args.edits):
            grown = rng.choice(paragraphs)
            ones.append(_new_chunks(chunk_elements(edited(elements, [grown]), counter, target=target,
                                                   hard_max=hard_max), old))
            first = rng.choice(paragraphs[: len(paragraphs) // 2])
            second = rng.choice(paragraphs[len(paragraphs) // 2:])
            twos.append(_new_chunks(chunk_elements(edited(elements, [first], [second]), counter, target=target,
                                                   hard_max=hard_max), old))
        sizes = [c.token_count for c in base]
        ones.sort()
        print(f"{name[:30]:<30} {len(base):>7,} {statistics.mean(sizes):>8.1f} "
              f"{sum(s < 50 for s in sizes) / len(sizes):>6.1%} "
              f"{statistics.mean(ones):>20.1f} / {ones[int(0.9 * (len(ones) - 1))]:>3} / {ones[-1]:>5} "
              f"{statistics.mean(twos):>10.1f} / {max(twos):>5}", flush=True)


def _new_chunks(chunks, old: Counter) -> int:
    """Chunks of the new version whose text the old version does not have (each old text matched once)."""
    left = Counter(old)
    new = 0
    for chunk in chunks:
        if left[chunk.text] > 0:
            left[chunk.text] -= 1
        else:
            new += 1
    return new


if __name__ == "__main__":
    main()
