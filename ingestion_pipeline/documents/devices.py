"""Where the embedding model runs: the CPU, or an NVIDIA GPU through sentence-transformers on CUDA
(``INGESTION_EMBEDDING_DEVICE``: ``auto``, ``cpu`` or ``cuda``).

The device is part of the deployment's one model decision (``model_decision.py``): `model prepare` on a host
with CUDA judges float16 on it against float32 with the same quality gate as the CPU precisions, and records
``runtime = cuda``. A host then runs the decision on its GPU when it has one (and its setting allows it); a host
without one (a search API on CPU) runs the model in float32 on its CPU, and the probe check every host makes
decides whether those vectors are the deciding host's (float16 and float32 of the same weights agree to
0.9999; a host that disagrees refuses to embed). ``cuda`` on a host without CUDA is an error that says what is
missing, never a silent fall back.

Telling whether CUDA is there costs a torch import (seconds) only where an NVIDIA driver is installed: a plain
CPU host answers from ``/proc`` at once, so its embedding processes still import no torch.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from ingestion_pipeline.core.failures import CodedError

DEVICES = ("auto", "cpu", "cuda")
CUDA_BATCH_SIZE = 256  # chunks per model call on a GPU: small CPU batches leave it idle between calls
_DRIVER_FILE = Path("/proc/driver/nvidia/version")


class CudaUnavailable(CodedError):
    """``INGESTION_EMBEDDING_DEVICE=cuda`` on a host that cannot run CUDA."""

    def __init__(self, why: str) -> None:
        super().__init__("cuda_unavailable", f"INGESTION_EMBEDDING_DEVICE=cuda, but this host cannot embed on CUDA: "
                                             f"{why}; nothing was embedded",
                         suggestion="run it on a host with an NVIDIA GPU, its driver and torch's CUDA build, or set "
                                    "INGESTION_EMBEDDING_DEVICE=auto (the GPU where there is one) or cpu")


def validate_device(device: str) -> str:
    if device not in DEVICES:
        raise ValueError(f"embedding device must be one of {', '.join(DEVICES)}, not {device!r}")
    return device


@functools.lru_cache(maxsize=1)
def cuda_status() -> tuple[bool, str]:
    """Whether this host can embed on CUDA, and if not, why (a sentence)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False, f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    if not _DRIVER_FILE.exists() and shutil.which("nvidia-smi") is None:
        return False, f"no NVIDIA driver ({_DRIVER_FILE} is missing and nvidia-smi is not on the PATH)"
    try:
        import torch
    except ImportError as exc:
        return False, f"torch cannot be imported ({exc})"
    if not torch.cuda.is_available():
        built = torch.version.cuda or "none (a CPU-only build)"
        return False, f"torch {torch.__version__} sees no CUDA device (its CUDA: {built})"
    return True, torch.cuda.get_device_name(0)


def runs_on_cuda(device: str) -> bool:
    """Whether a host set to ``device`` embeds on its GPU: ``cuda`` must (``CudaUnavailable`` if it cannot),
    ``auto`` does where CUDA is there, ``cpu`` never does."""
    validate_device(device)
    if device == "cpu":
        return False
    available, why = cuda_status()
    if device == "cuda" and not available:
        raise CudaUnavailable(why)
    return available


def gpu_identity() -> str:
    """The GPU a decision was judged on, for the record (``model show``)."""
    available, name = cuda_status()
    return f"cuda:{name}" if available else "cuda:unknown"
