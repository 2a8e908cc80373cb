"""py3langid's classifier over many texts at once: its byte automaton walked for all of them together in numpy.

py3langid (``LanguageIdentifier.classify``) walks a text's UTF-8 bytes through a finite automaton one byte at a
time in Python, counting the n-gram features the states it passes emit, then scores the counts against its
naive-Bayes table, whose float16 rows numpy converts slowly: the two halves of a chunk's language detection
(benchmarks/pipeline_ceiling.py measures it). Here the texts' bytes are laid out as rows of one array, longest
first, and the automaton takes one step for every still-unfinished row per numpy operation; each text's counts are
then scored exactly as py3langid scores them: the same features in the same (first-seen) order, the same float32
arithmetic, the same normalisation. The results are py3langid's, bit for bit (``test_batch_language_id.py`` holds
it over many scripts and lengths; on the corpus's 9,657 chunks, every configuration the same); where the identifier
lacks the parts this reads (another py3langid release), ``classify_many`` asks it one text at a time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

ROWS_PER_WALK = 512  # texts walked together: a walk's arrays are ROWS_PER_WALK x the longest text's bytes


class BatchIdentifier:
    """``classify_many(texts)``: what ``identifier.classify`` returns for each text."""

    def __init__(self, identifier) -> None:
        self.identifier = identifier
        try:
            moves = identifier.tk_nextmove
            self._moves = (np.frombuffer(moves, dtype=np.dtype(moves.typecode)) if hasattr(moves, "typecode")
                           else np.asarray(moves))
            self._row_base = np.asarray(identifier._rowbase, dtype=np.int64)
            self._feature = np.asarray(identifier.tk_output, dtype=np.int64)  # a state's feature, or -1
            self._table, self._prior = identifier.nb_ptc, identifier.nb_pc
            # The table's rows in float32, converted as texts first need them: numpy converts float16 slowly
            # (a large part of a text's time), and the whole table in float32 is 57 MB where a language's texts
            # touch a fraction of its rows. np.zeros commits memory only where rows are written.
            self._table32 = np.zeros(self._table.shape, dtype=np.float32)
            self._converted = np.zeros(self._table.shape[0], dtype=bool)
            self._converting = threading.Lock()  # file lanes chunk on threads of one process
            self._classes, self._aliases = identifier.nb_classes, identifier._alias_pairs
            self._normalised, self._encode = identifier._norm_probs, identifier._encode
            self.batched = (self._feature.ndim == 1 and self._normalised
                            and identifier.min_confidence is None)
        except (AttributeError, TypeError, ValueError):
            self.batched = False

    def classify_many(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        if not self.batched:
            return [self.identifier.classify(text) for text in texts]
        results: list[tuple[str, float]] = []
        for start in range(0, len(texts), ROWS_PER_WALK):
            results.extend(self._classify(texts[start:start + ROWS_PER_WALK]))
        return results

    def _classify(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        encoded = [self._encode(text) for text in texts]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        order = np.argsort(-lengths, kind="stable")  # longest first: the rows still walking are a prefix
        features = self._walk([encoded[i] for i in order], lengths[order])
        used = np.unique(features[features >= 0])
        with self._converting:
            missing = used[~self._converted[used]]
            if missing.size:
                self._table32[missing] = self._table[missing]
                self._converted[missing] = True
        results: list[tuple[str, float] | None] = [None] * len(encoded)
        for row, i in enumerate(order):
            results[i] = self._decide(features[row, :lengths[i]], len(encoded[i]))
        return results

    def _walk(self, encoded: list[bytes], lengths: np.ndarray) -> np.ndarray:
        """Each row's feature at each of its bytes (-1: none), rows longest first."""
        rows, width = len(encoded), int(lengths[0]) if len(encoded) else 0
        grid = np.zeros((rows, width), dtype=np.int64)
        for row, data in enumerate(encoded):
            grid[row, :len(data)] = np.frombuffer(data, dtype=np.uint8)
        features = np.full((rows, width), -1, dtype=np.int64)
        state = np.zeros(rows, dtype=np.int64)
        walking = rows
        for column in range(width):
            while lengths[walking - 1] <= column:
                walking -= 1
            state[:walking] = self._moves[self._row_base[state[:walking]] + grid[:walking, column]]
            features[:walking, column] = self._feature[state[:walking]]
        return features

    def _decide(self, features: np.ndarray, size: int) -> tuple[str, float]:
        """py3langid's ``_raw_score`` and ``_decide`` from a text's features (normalised probabilities)."""
        features = features[features >= 0]
        if features.size:
            seen, first, counts = np.unique(features, return_index=True, return_counts=True)
            in_order = np.argsort(first, kind="stable")  # py3langid's Counter keeps first-seen order
            scores = (np.log1p(counts[in_order].astype(np.float32))
                      @ self._table32[seen[in_order]] + self._prior)
        else:  # no feature: every class alike
            scores = np.zeros(len(self._classes), dtype=np.float32)
        scores *= 1.0 / math.sqrt(size or 1)  # py3langid's temperature: calibrated across lengths
        np.exp(scores - scores.max(), out=scores)
        scores /= scores.sum()
        for i, j in self._aliases:  # a label of two columns (a script's alias) counts once, in its first
            scores[i] += scores[j]
            scores[j] = 0.0
        best = int(scores.argmax())
        return self._classes[best], float(scores[best])
