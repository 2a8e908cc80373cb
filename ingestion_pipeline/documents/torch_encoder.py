"""sentence-transformers on torch: the reference the exports are checked against, and the runtime on a GPU.

Its own module because importing torch takes seconds: the pipeline's embedding processes on a CPU run the
export (OpenVINO, ONNX Runtime) and never import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingestion_pipeline.documents.devices import CUDA_BATCH_SIZE

if TYPE_CHECKING:
    import numpy as np


class TorchEncoder:
    """sentence-transformers on torch (imports torch: seconds), on the CPU or a CUDA device; ``half``: the
    weights in float16 (on CUDA)."""

    def __init__(self, model_path: str, *, device: str = "cpu", half: bool = False) -> None:
        from sentence_transformers import SentenceTransformer

        self.device = device
        self._model = SentenceTransformer(model_path, device=device, local_files_only=True)
        if half:
            self._model.half()

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        if self.device != "cpu":  # a GPU is fed big batches (devices.CUDA_BATCH_SIZE), whatever the CPU's are
            batch_size = max(batch_size, CUDA_BATCH_SIZE)
        vectors = self._model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                                     show_progress_bar=False)
        import numpy as np

        return vectors.astype(np.float32, copy=False)
