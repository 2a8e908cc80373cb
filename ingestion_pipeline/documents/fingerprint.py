"""The pipeline fingerprint: what, besides the bytes, decides a version's chunks and vectors.

Same bytes + same fingerprint = nothing to do. A change of extractor, chunker settings or model
(its weights, configuration or tokenizer; its vector dimension) changes the fingerprint.
"""

from __future__ import annotations

import hashlib
import json

from ingestion_pipeline.documents.chunking import CHUNKER_VERSION
from ingestion_pipeline.documents.embedding import ModelInfo
from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION


def pipeline_fingerprint(model: ModelInfo, target_tokens: int, max_tokens: int) -> str:
    spec = {
        "extractor": EXTRACTOR_VERSION,
        "chunker": {"version": CHUNKER_VERSION, "target_tokens": target_tokens, "max_tokens": max_tokens},
        # the model by what it is (its files' SHA-256), not by where it lies or its name
        "model": {"digest": model.digest, "dimension": model.dimension, "max_seq_length": model.max_seq_length},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"fp2-{digest[:16]}"
