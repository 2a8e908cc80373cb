"""The pipeline fingerprint: what, besides the bytes, decides a version's chunks and vectors.

Same bytes + same fingerprint = nothing to do. A change of extractor, chunker settings or model
changes the fingerprint, so the next backfill re-indexes (reusing vectors of unchanged chunk text
when the model is unchanged).
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
        "model": {"name": model.name, "dimension": model.dimension},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return f"fp1-{digest[:16]}"
