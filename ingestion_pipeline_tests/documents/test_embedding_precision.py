"""INGESTION_EMBEDDING_PRECISION: the quality gate, the choice it allows, and the fingerprint it changes."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.documents import precision, quality_gate
from ingestion_pipeline.documents.embedding import default_model_path, model_info
from ingestion_pipeline.documents.fingerprint import pipeline_fingerprint
from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS, OpenVinoEncoder, exported_model
from ingestion_pipeline.documents.precision import Candidate, Evaluation, choose
from ingestion_pipeline.documents.quality_gate import Measurement, Verdict, judge
from ingestion_pipeline.documents.quantization import INT8_OPENVINO


def measurement(probes: np.ndarray, recall_at_5: float = 0.6, recall_at_10: float = 0.7, top10=None,
                seconds: float = 10.0) -> Measurement:
    top10 = np.tile(np.arange(10), (4, 1)) if top10 is None else top10
    return Measurement(probe_vectors=probes, recall_at_5=recall_at_5, recall_at_10=recall_at_10, top10=top10,
                       seconds=seconds)


def unit_rows(n: int = 5, dim: int = 8, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dim))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_the_gate_passes_equal_vectors_and_names_every_criterion_a_candidate_misses():
    probes = unit_rows()
    assert judge(measurement(probes), measurement(probes, recall_at_5=0.596)).passed  # within 0.005
    assert judge(measurement(probes), measurement(probes, recall_at_5=0.7)).passed  # better is not a loss
    other = unit_rows(seed=1)
    shifted = np.tile(np.arange(5, 15), (4, 1))  # half of each top 10 is other chunks
    verdict = judge(measurement(probes), measurement(other, recall_at_5=0.59, recall_at_10=0.69, top10=shifted))
    assert not verdict.passed and len(verdict.failures) == 4
    assert [f.split()[0] for f in verdict.failures] == ["min", "recall@5", "recall@10", "top-10"]
    assert verdict.top10_overlap == 0.5 and Verdict.from_json(verdict.to_json()) == verdict


def test_known_item_ranks_and_top_k_count_what_they_say():
    chunks = unit_rows(4)
    passages_ = chunks[[0, 1, 2, 3]] + 0.01
    ranks = quality_gate.own_chunk_ranks(passages_, chunks, np.array([0, 1, 2, 0]))
    assert ranks[:3].tolist() == [0, 0, 0] and ranks[3] > 0  # the last passage is chunk 3's, not chunk 0's
    assert quality_gate.top_k(chunks[:1], chunks, k=2)[0, 0] == 0
    texts, owners = quality_gate.passages(["one two three four five six seven eight"])
    assert texts[2] == "five six seven eight" and owners.tolist() == [0, 0, 0]


def evaluation(name: str, seconds: float, passed: bool = True, runtime: str = "openvino") -> Evaluation:
    verdict = Verdict(min_cosine=0.99, recall_at_5=0.6, recall_at_10=0.7, reference_recall_at_5=0.6,
                      reference_recall_at_10=0.7, top10_overlap=1.0, seconds=seconds, reference_seconds=10.0,
                      failures=() if passed else ("recall@5 0.5 is more than 0.005 below float32's 0.6",))
    return Evaluation(Candidate(name, runtime, f"{name}.model"), verdict)


def test_auto_takes_the_fastest_candidate_that_passes_and_only_if_it_is_clearly_faster():
    fast_but_failing = evaluation("int8", 4.0, passed=False)
    assert choose("auto", [fast_but_failing, evaluation("bf16", 6.0)], "auto").candidate.precision == "bf16"
    assert choose("auto", [evaluation("int8", 9.8)], "auto").candidate.precision == "f32"  # 2 %: noise
    assert choose("auto", [], "auto") == precision.Choice(precision.reference("auto"))
    assert choose("f32", [evaluation("int8", 1.0)], "onnx").candidate == Candidate("f32", "onnx", "model.onnx")
    onnx_fails = Evaluation(Candidate("int8", "onnx", "x"), None, "ImportError: no onnxruntime")
    asked = choose("int8", [fast_but_failing, onnx_fails], "auto")
    assert asked.candidate.precision == "f32"
    assert "INGESTION_EMBEDDING_PRECISION=int8 is not used" in asked.warning
    assert "int8/openvino: recall@5 0.5" in asked.warning and "int8/onnx: ImportError" in asked.warning
    assert choose("int8", [evaluation("int8", 12.0)], "auto").candidate.precision == "int8"  # asked for: slower too
    with pytest.raises(ValueError, match="embedding precision must be one of"):
        choose("int4", [], "auto")


def test_the_precision_is_in_the_fingerprint_and_in_which_stored_vectors_are_reused():
    info = model_info(default_model_path())
    assert info.precision == "f32" and info.vectors_digest == info.digest
    int8 = dataclasses.replace(info, precision="int8")
    assert pipeline_fingerprint(int8, 200, 256) != pipeline_fingerprint(info, 200, 256)
    assert int8.vectors_digest == f"{info.digest}+int8"


def test_an_unknown_precision_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("INGESTION_EMBEDDING_PRECISION", "half")
    with pytest.raises(ValueError, match="INGESTION_EMBEDDING_PRECISION must be auto, int8, bf16, f16 or f32"):
        load_settings()
    with pytest.raises(ValueError, match="embedding precision must be one of"):
        choose("fp8", [], "auto")


def test_candidates_this_cpu_cannot_speed_up_are_skipped_unjudged_and_say_why(monkeypatch):
    """int8 without VNNI or AMX, bfloat16 without a bfloat16 unit: judging them would cost minutes and could
    never pick them (they are not faster)."""
    int8, bf16 = Candidate("int8", "onnx", "x"), Candidate("bf16", "openvino", "model.onnx")
    avx2 = {"avx2", "fma", "avx512f"}
    assert "no VNNI or AMX" in precision.cannot_be_faster(int8, avx2)
    assert "no bfloat16 unit" in precision.cannot_be_faster(bf16, avx2)
    assert precision.cannot_be_faster(int8, avx2 | {"avx512_vnni"}) is None
    assert precision.cannot_be_faster(bf16, avx2 | {"amx_bf16"}) is None
    monkeypatch.setattr(precision, "cpu_flags", lambda: avx2)
    evaluations = precision.evaluate("unused", Path("unused.onnx"), "auto")  # nothing is built or loaded
    assert {e.candidate.label for e in evaluations} == {"bf16/openvino", "int8/openvino", "int8/onnx"}
    assert all(e.verdict is None and e.why_not.startswith("skipped:") for e in evaluations)
    chosen = choose("int8", evaluations, "auto")
    assert chosen.candidate.precision == "f32" and "no VNNI or AMX" in chosen.warning


def judge_int8(cache: str) -> dict:
    """In a child process (see below): the choice for int8, and NNCF's probe cosine computed here."""
    model_path = default_model_path()
    onnx_file = exported_model(model_path, model_info(model_path).digest, Path(cache))
    chosen = choose("int8", precision.judged(model_path, onnx_file, "auto"), "auto")
    nncf = Candidate("int8", "openvino", INT8_OPENVINO)
    cosine = None
    if precision.cannot_be_faster(nncf, precision.cpu_flags()) is None:
        reference = OpenVinoEncoder(model_path, onnx_file, "f32")
        int8 = precision.build_encoder(nncf, model_path, onnx_file)
        cosine = float((reference.encode(PROBE_TEXTS, 8) * int8.encode(PROBE_TEXTS, 8)).sum(axis=1).min())
    return {"precision": chosen.candidate.precision, "warning": chosen.warning, "nncf_probe_cosine": cosine}


@pytest.mark.slow
def test_real_int8_models_are_judged_once_and_used_only_if_they_pass(model_cache, caplog):
    """NNCF's and ONNX Runtime's int8 models of the packaged model, judged on the packaged gate texts; the
    judgement is checked here against figures computed apart from the gate's code. The judging runs in a
    child process, as it would in a run: NNCF and the models it builds would otherwise raise this worker's
    peak memory, which later tests' children inherit in the peak RSS they measure."""
    code = ("import json, sys; from ingestion_pipeline_tests.documents.test_embedding_precision import judge_int8; "
            "print(json.dumps(judge_int8(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(model_cache)], capture_output=True, text=True,
                          check=True, env=os.environ.copy(), cwd=Path(__file__).resolve().parents[2])
    chosen = json.loads(done.stdout.strip().splitlines()[-1])
    model_path = default_model_path()
    onnx_file = exported_model(model_path, model_info(model_path).digest, model_cache)
    with caplog.at_level(logging.INFO, logger="ingestion_pipeline.embedding"):
        evaluations = precision.judged(model_path, onnx_file, "auto")  # read back: judged once, by the child
    assert "judging the embedding model's reduced precisions" not in caplog.text
    assert {e.candidate.label for e in evaluations} >= {"int8/openvino", "int8/onnx"}
    skipped = [e for e in evaluations if e.verdict is None]
    assert all(e.error.startswith("skipped: this CPU") for e in skipped), [e.error for e in skipped]
    if any(e.usable and e.candidate.precision == "int8" for e in evaluations):
        assert chosen["precision"] == "int8"
    else:
        assert chosen["precision"] == "f32" and "is not used, float32 is" in chosen["warning"]
    if chosen["nncf_probe_cosine"] is None:  # a CPU that cannot speed int8 up: nothing was judged
        assert all(e.candidate.precision != "int8" or e.verdict is None for e in evaluations)
        return
    # each verdict by the rules, from its own figures; and NNCF's probe cosine, computed by the child
    for e in (e for e in evaluations if e.verdict is not None):
        v = e.verdict
        by_the_rules = (v.min_cosine >= 0.98 and v.recall_at_5 >= v.reference_recall_at_5 - 0.005
                        and v.recall_at_10 >= v.reference_recall_at_10 - 0.005 and v.top10_overlap >= 0.95)
        assert v.passed == by_the_rules, e
    nncf = next(e for e in evaluations if e.candidate.label == "int8/openvino")
    assert chosen["nncf_probe_cosine"] == pytest.approx(nncf.verdict.min_cosine, abs=1e-3)
    assert 0.5 < nncf.verdict.reference_recall_at_5 < nncf.verdict.reference_recall_at_10 <= 1.0
