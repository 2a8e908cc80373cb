"""The quality gate a reduced-precision model (int8, bfloat16) must pass before the pipeline embeds with it.

A candidate is judged against the float32 model on texts packaged with the pipeline (``quality_gate.json``:
real chunks of a document corpus, chunked as the pipeline chunks, and queries written by hand; made by
``scripts/quality_gate_texts.py``):

- the minimum cosine between its vectors and float32's of the probe texts (``onnx_encoder.PROBE_TEXTS``)
  is at least ``GATE_MIN_COSINE``;
- known-item recall@5 and recall@10 are within ``RECALL_TOLERANCE`` of float32's: from every chunk, the 12
  words a quarter, a third and half of the way in are searched among all the chunks, and the chunk they
  came from should be among the nearest (``benchmarks/embedding_backends.py`` measures the same on 1,317
  chunks);
- for each query, the 10 chunks it ranks first share at least ``MIN_TOP10_OVERLAP`` with float32's top 10
  on average.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

GATE_FILE = Path(__file__).with_name("quality_gate.json")
GATE_MIN_COSINE = 0.98
RECALL_TOLERANCE = 0.005
MIN_TOP10_OVERLAP = 0.95
_PASSAGE_WORDS = 12
_PASSAGE_AT = (4, 3, 2)  # a quarter, a third and half of the way into each chunk


class Encoder(Protocol):
    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """L2-normalised vectors, one row per text."""


@dataclass(frozen=True)
class GateTexts:
    chunks: list[str]  # judged on
    queries: list[str]
    calibration: list[str]  # other chunks of the same documents: NNCF's calibration set


def load_gate_texts(path: Path = GATE_FILE) -> GateTexts:
    data = json.loads(path.read_text(encoding="utf-8"))
    return GateTexts(chunks=list(data["chunks"]), queries=list(data["queries"]),
                     calibration=list(data["calibration"]))


def passages(chunks: list[str]) -> tuple[list[str], np.ndarray]:
    """The known-item passages of ``chunks`` and, for each, the index of the chunk it came from."""
    import numpy as np

    out: list[str] = []
    for text in chunks:
        words = text.split()
        out += [" ".join(words[len(words) // part:len(words) // part + _PASSAGE_WORDS]) for part in _PASSAGE_AT]
    return out, np.repeat(np.arange(len(chunks)), len(_PASSAGE_AT))


def own_chunk_ranks(passage_vectors: np.ndarray, chunk_vectors: np.ndarray, owners: np.ndarray) -> np.ndarray:
    """For each passage, how many chunks score strictly higher than the one it came from (0: found first)."""
    import numpy as np

    scores = passage_vectors @ chunk_vectors.T
    return (scores > scores[np.arange(len(owners)), owners][:, None]).sum(axis=1)


def top_k(query_vectors: np.ndarray, chunk_vectors: np.ndarray, k: int = 10) -> np.ndarray:
    """Each query's ``k`` best chunks (indexes), best first; ties broken by index so a ranking is stable."""
    import numpy as np

    scores = query_vectors @ chunk_vectors.T
    return np.lexsort((np.broadcast_to(np.arange(scores.shape[1]), scores.shape), -scores), axis=1)[:, :k]


@dataclass(frozen=True)
class Measurement:
    """One model's vectors of the gate texts, and what retrieval with them scores."""

    probe_vectors: np.ndarray
    recall_at_5: float
    recall_at_10: float
    top10: np.ndarray
    seconds: float  # encoding the chunks (batch 16), the figure ``auto`` compares


def measure(encoder: Encoder, texts: GateTexts, probes: list[str], batch_size: int = 16) -> Measurement:
    import numpy as np

    encoder.encode(texts.chunks[:batch_size], batch_size)  # a first call may compile or allocate: not timed
    started = time.perf_counter()
    chunk_vectors = encoder.encode(texts.chunks, batch_size)
    seconds = time.perf_counter() - started
    passage_texts, owners = passages(texts.chunks)
    ranks = own_chunk_ranks(encoder.encode(passage_texts, batch_size), chunk_vectors, owners)
    return Measurement(probe_vectors=encoder.encode(probes, batch_size), recall_at_5=float(np.mean(ranks < 5)),
                       recall_at_10=float(np.mean(ranks < 10)),
                       top10=top_k(encoder.encode(texts.queries, batch_size), chunk_vectors),
                       seconds=seconds)


@dataclass(frozen=True)
class Verdict:
    """A candidate's figures beside float32's, and the criteria it missed (none: it passed)."""

    min_cosine: float
    recall_at_5: float
    recall_at_10: float
    reference_recall_at_5: float
    reference_recall_at_10: float
    top10_overlap: float
    seconds: float
    reference_seconds: float
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict:
        return asdict(self) | {"failures": list(self.failures)}

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        return cls(**(data | {"failures": tuple(data["failures"])}))


def judge(reference: Measurement, candidate: Measurement) -> Verdict:
    import numpy as np

    min_cosine = float((reference.probe_vectors * candidate.probe_vectors).sum(axis=1).min())
    overlap = float(np.mean([len(set(a) & set(b)) / len(a) for a, b in zip(reference.top10, candidate.top10,
                                                                             strict=True)]))
    failures = []
    if min_cosine < GATE_MIN_COSINE:
        failures.append(f"min cosine to float32 {min_cosine:.4f} < {GATE_MIN_COSINE}")
    for k, ours, theirs in ((5, candidate.recall_at_5, reference.recall_at_5),
                            (10, candidate.recall_at_10, reference.recall_at_10)):
        if ours < theirs - RECALL_TOLERANCE:
            failures.append(f"recall@{k} {ours:.4f} is more than {RECALL_TOLERANCE} below float32's {theirs:.4f}")
    if overlap < MIN_TOP10_OVERLAP:
        failures.append(f"top-10 overlap with float32 {overlap:.3f} < {MIN_TOP10_OVERLAP}")
    return Verdict(min_cosine=min_cosine, recall_at_5=candidate.recall_at_5, recall_at_10=candidate.recall_at_10,
                   reference_recall_at_5=reference.recall_at_5, reference_recall_at_10=reference.recall_at_10,
                   top10_overlap=overlap, seconds=candidate.seconds, reference_seconds=reference.seconds,
                   failures=tuple(failures))
