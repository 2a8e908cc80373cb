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

    def encode(self, texts: list[str], batch_size: int, tokens: list[np.ndarray] | None = None) -> np.ndarray:
        """One L2-normalised vector a text; ``tokens``, when given, is extended with each text's token vectors
        (``late_interaction.token_matrix``), from the same inference."""
        import numpy as np

        if self.device != "cpu":  # a GPU is fed big batches (devices.CUDA_BATCH_SIZE), whatever the CPU's are
            batch_size = max(batch_size, CUDA_BATCH_SIZE)
        if tokens is None:
            vectors = self._model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                         convert_to_numpy=True, show_progress_bar=False)
            return vectors.astype(np.float32, copy=False)
        from ingestion_pipeline.documents.late_interaction import token_matrix

        outputs = self._model.encode(texts, batch_size=batch_size, output_value=None, show_progress_bar=False)
        vectors = []
        for out in outputs:
            hidden = out["token_embeddings"].float().cpu().numpy()  # the batch's padding included
            tokens.append(token_matrix(hidden, int(out["attention_mask"].sum())))
            pooled = out["sentence_embedding"].float().cpu().numpy()
            vectors.append(pooled / max(float(np.linalg.norm(pooled)), 1e-12))
        return np.asarray(vectors, dtype=np.float32)
