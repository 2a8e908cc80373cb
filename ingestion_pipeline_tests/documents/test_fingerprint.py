"""The fingerprint names a model by its files' content, not by its folder's name or its weights' size."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ingestion_pipeline.documents.embedding import default_model_path, model_info
from ingestion_pipeline.documents.fingerprint import pipeline_fingerprint


def _copy_model(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(default_model_path(), target)
    return target


def test_the_same_model_anywhere_is_the_same_and_one_changed_byte_is_not(tmp_path):
    packaged = pipeline_fingerprint(model_info(default_model_path()), 200, 256)
    moved = _copy_model(tmp_path, "renamed-folder")
    assert pipeline_fingerprint(model_info(str(moved)), 200, 256) == packaged
    weights = moved / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, other weights: the old "name:size" identity could not tell
    weights.write_bytes(bytes(data))
    assert pipeline_fingerprint(model_info(str(moved)), 200, 256) != packaged
    assert pipeline_fingerprint(model_info(default_model_path()), 200, 300) != packaged  # chunk budgets count too


def test_a_changed_tokenizer_or_dimension_changes_it(tmp_path):
    packaged = pipeline_fingerprint(model_info(default_model_path()), 200, 256)
    moved = _copy_model(tmp_path, "m")
    (moved / "tokenizer_config.json").write_text((moved / "tokenizer_config.json").read_text().replace("true", "false"))
    assert pipeline_fingerprint(model_info(str(moved)), 200, 256) != packaged
    other = _copy_model(tmp_path, "wide")
    pooling = other / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace("384", "768"))
    info = model_info(str(other))
    assert info.dimension == 768 and pipeline_fingerprint(info, 200, 256) != packaged


def test_a_folder_without_weights_is_refused(tmp_path):
    empty = _copy_model(tmp_path, "no-weights")
    (empty / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="no model weights"):
        model_info(str(empty))
