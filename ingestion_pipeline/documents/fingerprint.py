"""The pipeline fingerprint: what, besides the bytes, decides a version's chunks and vectors.

Same bytes + same fingerprint = nothing to do. A change of extractor, chunker settings or model
(its weights, configuration or tokenizer; its vector dimension; the precision it runs in) changes the
fingerprint, and so does a change of what is kept for search beside each vector (``TOKEN_VECTORS``: a version
promoted before its chunks' token vectors were kept gets them by a re-index).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from ingestion_pipeline.documents.chunking import CHUNKER_VERSION
from ingestion_pipeline.documents.embedding import ModelInfo
from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION

# what each chunk keeps for late interaction (documents/late_interaction.py): its token vectors' signs
TOKEN_VECTORS = "signs-1"


def pipeline_fingerprint(model: ModelInfo, target_tokens: int, max_tokens: int,
                         extractor_version: str = EXTRACTOR_VERSION) -> str:
    """``extractor_version``: the extractor that made the elements (a re-index from stored elements keeps
    the one that extracted them)."""
    spec = {
        "extractor": extractor_version,
        "chunker": {"version": CHUNKER_VERSION, "target_tokens": target_tokens, "max_tokens": max_tokens},
        # the model by what it is (its files' SHA-256), not by where it lies or its name
        "model": {"digest": model.digest, "dimension": model.dimension, "max_seq_length": model.max_seq_length},
        "token_vectors": TOKEN_VECTORS,
    }
    if model.precision != "f32":  # float32 keeps the fingerprints made before precisions existed
        spec["model"]["precision"] = model.precision
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"fp2-{digest[:16]}"


def fingerprint_for(model: ModelInfo, target_tokens: int, max_tokens: int) -> Callable[[str | None], str | None]:
    """extractor version of some elements (None: no elements) -> the fingerprint chunking and embedding
    them now would give (None: nothing to chunk)."""
    return lambda extractor: (None if extractor is None
                              else pipeline_fingerprint(model, target_tokens, max_tokens, extractor))
