"""OpenVINO, ONNX Runtime and torch give the same vectors; the export is made once per model; OpenVINO
that differs falls back to ONNX Runtime, and what ONNX cannot run to torch; a process that embeds an
export never imports torch; the fast tokenizer counts as transformers' does."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.documents import onnx_encoder
from ingestion_pipeline.documents.chunking import chunk_elements, effective_budgets
from ingestion_pipeline.documents.embedding import Embedder, default_model_path
from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.tokens import load_token_counter
from ingestion_pipeline_tests.helpers import tiny_model

CORPUS_FILES = ("norwich-city.txt", "UDHR_first_article_all.txt", "eng_spa_mult.md", "codeblock.md",
                "example-10k-1p.html", "fake-memo.pdf")


@pytest.fixture(scope="module")
def corpus_chunks(corpus_dir) -> list[str]:
    counter = load_token_counter(default_model_path())
    settings = load_settings().chunk
    target, hard_max = effective_budgets(settings.target_tokens, settings.max_tokens, counter)
    texts = []
    for name in CORPUS_FILES:
        path = corpus_dir / "documents" / name
        texts += [c.text for c in chunk_elements(extract(path, path.suffix).elements, counter, target=target,
                                                 hard_max=hard_max)]
    return texts


@pytest.fixture(scope="module")
def torch_vectors(corpus_chunks, model_cache) -> tuple[list[str], np.ndarray]:
    """The texts both backends are compared on, and torch's vectors of them (encoded once for both)."""
    torch = Embedder(default_model_path(), backend="torch", cache_dir=model_cache)
    texts = corpus_chunks + ["x", "Ünïcödé, 中文, العربية", " ".join(["a long run of words"] * 300)]
    vectors = torch.embed(texts)
    assert torch.backend_in_use == "torch"
    return texts, vectors


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_exported_vectors_match_torch_on_the_corpus(backend, torch_vectors, model_cache):
    texts, reference = torch_vectors
    exported = Embedder(default_model_path(), backend=backend, cache_dir=model_cache)
    cosine = (exported.embed(texts) * reference).sum(axis=1)
    assert exported.backend_in_use == backend
    assert len(texts) > 100 and cosine.min() >= 0.9999


def test_openvino_that_does_not_match_torch_falls_back_to_onnx_runtime(tmp_path, monkeypatch):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"
    checked = []
    real = onnx_encoder._min_cosine

    def openvino_differs(reference, encoder):
        if isinstance(encoder, onnx_encoder.OpenVinoEncoder):
            checked.append(encoder.precision)
            return 0.99
        return real(reference, encoder)

    monkeypatch.setattr(onnx_encoder, "_min_cosine", openvino_differs)
    auto = Embedder(str(model), cache_dir=cache)
    assert auto.embed(["a text"]).shape == (1, 32) and auto.backend_in_use == "onnx"
    assert checked == ["f32"]  # float32 always: a reduced precision is the quality gate's to allow
    with pytest.raises(onnx_encoder.UnsupportedModel, match="OpenVINO vectors differ"):
        Embedder(str(model), backend="openvino", cache_dir=cache).embed(["a text"])


def test_openvino_that_fails_to_compile_falls_back_to_onnx_runtime(tmp_path, monkeypatch):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"

    def cannot_compile(*_args, **_kwargs):
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp: unsupported operation")

    monkeypatch.setattr(onnx_encoder.OpenVinoEncoder, "__init__", cannot_compile)
    auto = Embedder(str(model), cache_dir=cache)
    assert auto.embed(["a text"]).shape == (1, 32) and auto.backend_in_use == "onnx"
    with pytest.raises(onnx_encoder.UnsupportedModel, match="OpenVINO failed: RuntimeError: .*unsupported operation"):
        Embedder(str(model), backend="openvino", cache_dir=cache).embed(["a text"])


def test_an_export_made_before_probes_were_saved_gets_them_once(tmp_path, monkeypatch):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"
    first = Embedder(str(model), backend="onnx", cache_dir=cache)
    first.embed(["a text"])
    [probes] = cache.glob("*/probes.npy")
    saved = np.load(probes)
    probes.unlink()  # as an export of the last release left it

    def read_only(*_args):
        raise PermissionError("read-only file system")

    with monkeypatch.context() as patched:  # a cache it cannot write to: computed, used, not kept
        patched.setattr(onnx_encoder, "_save_probes", read_only)
        unsaved = Embedder(str(model), cache_dir=cache)
        assert unsaved.embed(["a text"]).shape == (1, 32) and unsaved.backend_in_use == "openvino"
    assert not probes.exists()
    again = Embedder(str(model), cache_dir=cache)
    assert again.embed(["a text"]).shape == (1, 32) and again.backend_in_use == "openvino"
    assert np.allclose(np.load(probes), saved, atol=1e-6)
    monkeypatch.setattr(onnx_encoder, "_torch_model", lambda *_: pytest.fail("probes computed again"))
    assert Embedder(str(model), cache_dir=cache).embed(["a text"]).shape == (1, 32)


def test_openvino_imports_its_compiled_model_from_the_cache_and_compiles_a_truncated_one_again(tmp_path):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"
    texts = ["one small text", "and another"]
    first = Embedder(str(model), cache_dir=cache)
    vectors = first.embed(texts)
    assert first.backend_in_use == "openvino" and not first.model.from_cache
    # the model in use was compiled last (a CPU computing in bf16 may have tried and kept that one first)
    blob = max(cache.glob(f"*/{onnx_encoder.OPENVINO_CACHE}/*.blob"), key=lambda path: path.stat().st_mtime_ns)
    size = blob.stat().st_size

    again = Embedder(str(model), cache_dir=cache)  # the next process: imports what the first compiled
    assert np.allclose(again.embed(texts), vectors, atol=1e-5) and again.model.from_cache

    with blob.open("r+b") as stream:  # as a process killed while writing it would leave it
        stream.truncate(size // 2)
    repaired = Embedder(str(model), cache_dir=cache)
    assert np.allclose(repaired.embed(texts), vectors, atol=1e-5) and repaired.backend_in_use == "openvino"
    assert not repaired.model.from_cache
    assert blob.stat().st_size > size // 2  # written again, whole: the next process imports it
    assert Embedder(str(model), cache_dir=cache).model.from_cache


def _exported_without_blob(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A tiny model exported to ONNX (by an ONNX Runtime load), before OpenVINO compiled it:
    (model folder, model cache, the export's folder)."""
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"
    Embedder(str(model), backend="onnx", cache_dir=cache).embed(["x"])
    [export] = cache.glob("*/model.onnx")
    return model, cache, export.parent


@pytest.mark.integration
def test_openvino_runs_without_its_cache_where_the_cache_cannot_be_written(tmp_path, caplog):
    model, cache, folder = _exported_without_blob(tmp_path)
    (folder / onnx_encoder.OPENVINO_CACHE).write_text("not a folder")  # as a read-only mount would refuse
    embedder = Embedder(str(model), cache_dir=cache)
    assert embedder.embed(["x"]).shape == (1, 32)
    assert embedder.backend_in_use == "openvino" and not embedder.model.from_cache
    assert "OpenVINO's model cache" in caplog.text and "compiling without it" in caplog.text


def test_an_openvino_load_waits_while_another_process_holds_the_compiled_model_cache(tmp_path):
    """OpenVINO writes a blob in place: a load takes its turn, so none reads a blob half written; a holder
    that is killed (SIGKILL) leaves no lock behind."""
    model, cache, folder = _exported_without_blob(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from ingestion_pipeline.documents.onnx_encoder import cache_lock\n"
         f"with cache_lock(Path({str(folder / onnx_encoder.OPENVINO_CACHE)!r})):\n"
         "    print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        loaded = []

        def load() -> None:
            embedder = Embedder(str(model), cache_dir=cache)
            loaded.append(embedder.embed(["x"]).shape)

        loading = threading.Thread(target=load)
        loading.start()
        loading.join(2.0)
        assert loading.is_alive() and loaded == []
    finally:
        holder.kill()  # SIGKILL: the lock goes with the process
        holder.wait()
    loading.join(120)
    assert loaded == [(1, 32)]


def test_the_export_is_made_once_per_model_digest(tmp_path, monkeypatch):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"
    first = Embedder(str(model), cache_dir=cache)
    vectors = first.embed(["one small text", "and another"])
    [exported] = cache.glob("*/model.onnx")
    assert first.backend_in_use == "openvino" and exported.parent.name == first.info.digest[:32]

    def no_export(*_args):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_encoder, "_export", no_export)
    again = Embedder(str(model), cache_dir=cache)  # another process's embedder: reads the export
    assert np.allclose(again.embed(["one small text", "and another"]), vectors, atol=1e-5)
    monkeypatch.undo()
    retrained = Embedder(str(tiny_model(tmp_path, seed=1)), cache_dir=cache)  # same folder, new weights
    retrained.embed(["one small text"])
    assert len(list(cache.glob("*/model.onnx"))) == 2


def test_a_pooling_onnx_cannot_run_falls_back_to_torch(tmp_path):
    model = tiny_model(tmp_path)
    config_path = model / "1_Pooling" / "config.json"
    config = json.loads(config_path.read_text())
    config["pooling_mode"] = "mean_sqrt_len_tokens"
    config_path.write_text(json.dumps(config))
    cache = tmp_path / "models"

    auto = Embedder(str(model), cache_dir=cache)
    vectors = auto.embed(["a text"])
    assert auto.backend_in_use == "torch" and vectors.shape == (1, 32)
    assert not list(cache.glob("*/model.onnx"))
    with pytest.raises(onnx_encoder.UnsupportedModel, match="pooling"):
        Embedder(str(model), backend="onnx", cache_dir=cache).embed(["a text"])


def test_an_export_that_does_not_match_torch_is_refused_and_remembered(tmp_path, monkeypatch):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"
    monkeypatch.setattr(onnx_encoder, "_min_cosine_against_torch", lambda *_: 0.98)
    auto = Embedder(str(model), cache_dir=cache)
    auto.embed(["a text"])
    assert auto.backend_in_use == "torch"
    [refused] = cache.glob("*/unsupported.txt")
    assert "min cosine 0.980000" in refused.read_text()
    monkeypatch.setattr(onnx_encoder, "_export", lambda *_: pytest.fail("tried to export again"))
    later = Embedder(str(model), cache_dir=cache)
    later.embed(["a text"])
    assert later.backend_in_use == "torch"


@pytest.mark.integration
def test_a_process_embedding_an_export_imports_neither_torch_nor_transformers(model_cache):
    Embedder(default_model_path(), cache_dir=model_cache).embed(["export it first, if no test did"])
    code = ("import sys; from ingestion_pipeline.documents.embedding import build_embedder; e = build_embedder(); "
            "v = e.embed(['hello']); n = e.token_counter.count('hello world'); "
            "print(e.backend_in_use, v.shape[1], n, 'torch' in sys.modules, 'transformers' in sys.modules)")
    env = {**os.environ, "INGESTION_MODEL_CACHE_DIR": str(model_cache)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["openvino", "384", "2", "False", "False"]


@pytest.mark.integration
def test_a_process_that_ends_while_the_model_warms_up_exits_cleanly(model_cache):
    """`process` starts loading the model as soon as files go on; a run with nothing left to embed ends
    while it loads. Ending under the runtime's compiler aborted the process (exit -6) before."""
    Embedder(default_model_path(), cache_dir=model_cache).embed(["export it first, if no test did"])
    env = {**os.environ, "INGESTION_MODEL_CACHE_DIR": str(model_cache)}
    for delay in (0.05, 0.1, 0.2, 0.3, 0.5):  # somewhere in the load: imports, compilation, the probes
        code = ("import time; from ingestion_pipeline.documents.embedding import build_embedder; "
                f"e = build_embedder(); e.warm_up(); time.sleep({delay})")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert done.returncode == 0, (delay, done.returncode, done.stderr[-2000:])


def test_the_fast_tokenizer_counts_and_cuts_as_transformers_does(corpus_chunks, corpus_dir):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(default_model_path())
    counter = load_token_counter(default_model_path())
    long_texts = [Path(corpus_dir / "documents" / n).read_text(errors="replace")[:30000]
                  for n in ("UDHR_first_article_all.txt", "norwich-city.txt")]
    texts = corpus_chunks + long_texts
    assert counter.count_many(texts) == [len(ids) for ids in reference(texts, add_special_tokens=False)["input_ids"]]
    for text in long_texts:  # offsets decide where split() cuts
        expected = reference(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        assert counter._tokenizer.encode(text, add_special_tokens=False).offsets == expected
    assert counter.max_content_tokens == 254  # 256 (sentence_bert_config.json) minus [CLS] and [SEP]


def test_an_export_that_fails_falls_back_to_torch_and_is_not_tried_again(tmp_path, monkeypatch):
    model = tiny_model(tmp_path)
    cache = tmp_path / "models"

    def cannot_trace(*_args):
        raise RuntimeError("unsupported operator aten::something")

    monkeypatch.setattr(onnx_encoder, "_export", cannot_trace)
    auto = Embedder(str(model), cache_dir=cache)
    assert auto.embed(["a text"]).shape == (1, 32) and auto.backend_in_use == "torch"
    [refused] = cache.glob("*/unsupported.txt")
    assert "aten::something" in refused.read_text() and not list(cache.glob("*/*.part"))
    with pytest.raises(onnx_encoder.UnsupportedModel, match="aten::something"):
        Embedder(str(model), backend="onnx", cache_dir=cache).embed(["a text"])


@pytest.mark.parametrize("count", [1, 2, 3, 7, 12])
def test_openvino_batches_in_flight_come_back_in_order(tmp_path, count):
    """The encoder keeps several batches in flight (one per stream); each text's vector is the one it gets
    when batches run one at a time, whatever the number of texts against batch size and requests."""
    model = tiny_model(tmp_path)
    embedder = Embedder(str(model), backend="openvino", cache_dir=tmp_path / "models")
    embedder.embed(["export it"])
    encoder = embedder.model
    assert isinstance(encoder, onnx_encoder.OpenVinoEncoder)
    encoder.requests = 3  # more than this machine's streams: the extra requests queue, the order must hold
    texts = [f"text number {i} " + "word " * (i * 7 % 23) for i in range(count)]
    in_flight = encoder.encode(texts, 2)
    one_at_a_time = onnx_encoder._ExportedEncoder.encode(encoder, texts, 2)
    assert in_flight.shape == (count, 32)
    assert np.allclose(in_flight, one_at_a_time, atol=1e-5)


def test_an_embedder_with_threads_embeds_on_the_calling_thread_with_the_same_vectors(model_cache):
    """The API's query embedder (``threads=1``): ONNX Runtime on the caller's thread, no pool of its own, and
    the vectors of the default runtime."""
    texts = ["travel expense policy", "Ünïcödé, 中文", " ".join(["a long run of words"] * 300)]
    pooled = Embedder(default_model_path(), cache_dir=model_cache)
    own = Embedder(default_model_path(), cache_dir=model_cache, threads=1)
    cosine = (own.embed(texts) * pooled.embed(texts)).sum(axis=1)
    assert own.backend_in_use == "onnx" and cosine.min() >= 0.9999
    options = own.model._session.get_session_options()
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
