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


def test_the_digest_is_kept_for_the_next_process_and_a_rewritten_file_is_read_again(tmp_path, monkeypatch):
    """A `submit` reads the model's digest kept under the data folder instead of ~90 MB; a weights file written
    again with its size and mtime restored (``cp -p``, rsync) is still seen as changed: its ctime moved."""
    import hashlib
    import os
    import time

    from ingestion_pipeline.documents import embedding

    monkeypatch.setenv("INGESTION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(embedding, "_SETTLED_SECONDS", 0.0)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 4}')
    weights = model / "model.safetensors"
    weights.write_bytes(b"a" * 4096)
    time.sleep(0.05)

    def fresh() -> str:  # a new process: nothing in memory
        embedding._digest.cache_clear()
        return embedding.model_digest(model)

    first = fresh()
    [kept] = (tmp_path / "data" / "models" / "digests").iterdir()
    assert kept.read_text() == first
    kept.write_text("f" * 64)  # what the next process reads, not the files
    assert fresh() == "f" * 64

    before = weights.stat()
    weights.write_bytes(b"b" * 4096)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert weights.stat().st_mtime_ns == before.st_mtime_ns and weights.stat().st_size == before.st_size
    expected = hashlib.sha256()
    for path in (weights, model / "config.json"):
        expected.update(path.name.encode() + b"\0" + path.read_bytes())
    assert fresh() == expected.hexdigest() != first


def test_a_model_written_moments_ago_is_not_kept(tmp_path, monkeypatch):
    """Within a timestamp tick a file may change again unseen: its digest is computed, not kept."""
    from ingestion_pipeline.documents import embedding

    monkeypatch.setenv("INGESTION_DATA_DIR", str(tmp_path / "data"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"a" * 64)
    embedding._digest.cache_clear()
    assert len(embedding.model_digest(model)) == 64
    assert not (tmp_path / "data" / "models" / "digests").exists()
