"""Int8 versions of the exported model, made once per model digest and kept beside its export.

Two post-training quantizers, both measured (``benchmarks/embedding_backends.py``) and both judged by the
quality gate (``quality_gate.py``) before either is used:

- **NNCF** (OpenVINO's): weights and activations in int8, the activations' ranges calibrated on real chunks
  (the gate's packaged chunks, tokenised as the pipeline tokenises); run by OpenVINO.
- **ONNX Runtime's dynamic quantization**: weights in 8 bits per output channel (unsigned: on this
  project's 1,317-chunk set, signed weights lost 0.006 of recall@5 and unsigned none), activations quantised
  per batch as it runs (no calibration); run by ONNX Runtime.

Each is written to a temporary folder and renamed into place, so a concurrent process sees a whole model
or none (the caller also holds the export folder's lock while it builds).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_log = logging.getLogger(__name__)
INT8_OPENVINO = "int8-openvino/model.xml"  # relative to the export's folder
INT8_ONNX = "int8-onnx/model.onnx"
CALIBRATION_SAMPLES = 200  # NNCF's statistics: one chunk per sample


def quantize_openvino(onnx_file: Path, calibration: list[dict[str, np.ndarray]]) -> Path:
    """NNCF's int8 model of the export (``model.xml`` + ``model.bin``), calibrated on ``calibration``."""
    import nncf
    import openvino as ov

    def write(folder: Path) -> None:
        model = ov.Core().read_model(str(onnx_file))
        _log.info("calibrating NNCF's int8 model on %d chunks", len(calibration))
        nncf.set_log_level(logging.WARNING)
        with contextlib.redirect_stdout(io.StringIO()):  # NNCF's progress bars: not for a run's log
            quantized = nncf.quantize(model, nncf.Dataset(calibration), model_type=nncf.ModelType.TRANSFORMER,
                                      subset_size=len(calibration))
        ov.save_model(quantized, str(folder / "model.xml"), compress_to_fp16=False)

    return _build(onnx_file.parent / INT8_OPENVINO, write)


def quantize_onnxruntime(onnx_file: Path) -> Path:
    """ONNX Runtime's dynamic int8 model of the export (weights per channel)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def write(folder: Path) -> None:
        # it logs a line per tensor at INFO, and advice on preprocessing at WARNING, on the root logger:
        # silenced for the second this takes
        logging.disable(logging.WARNING)
        try:
            quantize_dynamic(str(onnx_file), str(folder / "model.onnx"), weight_type=QuantType.QUInt8,
                             per_channel=True)
        finally:
            logging.disable(logging.NOTSET)

    return _build(onnx_file.parent / INT8_ONNX, write)


def _build(target: Path, write: Callable[[Path], None]) -> Path:
    if target.is_file():
        return target
    shutil.rmtree(target.parent, ignore_errors=True)  # what a build that died left
    staging = Path(tempfile.mkdtemp(dir=target.parent.parent, prefix=f".{target.parent.name}-"))
    try:
        write(staging)
        os.replace(staging, target.parent)  # atomic: the folder appears whole
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _log.info("built %s", target)
    return target
