"""Where the model runs (``INGESTION_EMBEDDING_DEVICE``), on this machine, which has no GPU: ``cuda`` is a clear
error naming what is missing, a decision judged on a GPU is run in float32 by a CPU host only when the probe
check says its vectors are the GPU's, float16 is chosen by the same rules as the CPU precisions, and the
embedding steps go to a Celery queue of their own, which a worker takes or not. The CUDA path itself needs an
NVIDIA GPU: not run here.
"""


import numpy as np
import pytest

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.documents import devices, model_decision
from ingestion_pipeline.documents.devices import CudaUnavailable
from ingestion_pipeline.documents.embedding import Embedder, default_model_path, model_info
from ingestion_pipeline.documents.model_decision import HostCannotEmbed, ModelDecision, RecordedDecisions
from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS
from ingestion_pipeline.documents.precision import CUDA_F16, CUDA_F32, Evaluation, choose
from ingestion_pipeline.documents.quality_gate import Verdict
from ingestion_pipeline.documents.torch_encoder import TorchEncoder
from ingestion_pipeline_tests.cli.test_corpus_cli import run_cli
from ingestion_pipeline_tests.helpers import table


@pytest.fixture(autouse=True)
def _fresh_status():
    devices.cuda_status.cache_clear()
    yield
    devices.cuda_status.cache_clear()


def test_cuda_on_a_host_without_a_gpu_is_an_error_that_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(CudaUnavailable, match="no NVIDIA driver") as raised:
        Embedder(default_model_path(), device="cuda").embed(["a chunk"])
    assert raised.value.code == "cuda_unavailable" and "INGESTION_EMBEDDING_DEVICE=auto" in raised.value.suggestion
    assert not devices.runs_on_cuda("auto") and not devices.runs_on_cuda("cpu")

    driver = tmp_path / "version"  # a driver present, and this machine's real torch (a CPU build) sees no GPU
    driver.write_text("NVRM version: 550\n")
    monkeypatch.setattr(devices, "_DRIVER_FILE", driver)
    devices.cuda_status.cache_clear()
    assert devices.cuda_status() == (False, devices.cuda_status()[1])
    assert "sees no CUDA device" in devices.cuda_status()[1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    devices.cuda_status.cache_clear()
    assert "hides every GPU" in devices.cuda_status()[1]
    with pytest.raises(ValueError, match="embedding device must be one of auto, cpu, cuda"):
        Embedder(default_model_path(), device="gpu")


@pytest.mark.integration  # a CLI process
def test_the_cli_exits_5_with_the_reason(database_url, project_dagster_home, monkeypatch, db, tmp_path):
    monkeypatch.setenv("INGESTION_EMBEDDING_DEVICE", "cuda")
    result = run_cli("model", "prepare", check=False)
    assert result.returncode == 5, result.stderr
    assert "INGESTION_EMBEDDING_DEVICE=cuda, but this host cannot embed on CUDA: no NVIDIA driver" in result.stderr
    # ingesting on it: the same exit, and the file waits for a host that can embed (no attempt spent)
    note = tmp_path / "note.md"
    note.write_text("# Note\n\nA note for a host with a GPU.\n")
    result = run_cli("ingest", str(note), "--tenant", "acme", check=False)
    assert result.returncode == 5 and "cannot embed on CUDA" in result.stderr, result.stderr[-2000:]
    assert table(db, "SELECT status, attempts FROM ingestion_runs") == [{"status": "queued", "attempts": 0}]
    monkeypatch.setenv("INGESTION_EMBEDDING_DEVICE", "tpu")
    refused = run_cli("model", "show", check=False)
    assert refused.returncode == 2 and "INGESTION_EMBEDDING_DEVICE must be auto, cpu or cuda" in refused.stderr


def _decision(probes: np.ndarray) -> ModelDecision:
    info = model_info(default_model_path())
    return ModelDecision(info.digest, info.name, CUDA_F16, "auto", "prepare", judged_on_cpu="cuda:NVIDIA H200",
                         probe_vectors=probes)


@pytest.mark.integration  # torch and the model, twice
def test_a_decision_judged_on_a_gpu_is_run_in_float32_by_a_cpu_host_the_probe_check_deciding(database_url):
    # float16 probe vectors, as a GPU host records them (float16 on torch's CPU kernels here)
    half = TorchEncoder(default_model_path(), half=True).encode(PROBE_TEXTS, len(PROBE_TEXTS))
    with Database(database_url) as db, db.transaction() as conn:
        model_decision.record(conn, _decision(half))
    host = Embedder(default_model_path(), decisions=RecordedDecisions(database_url), device="auto")
    vectors = host.embed(["the leave policy", "quarterly revenue"])
    assert vectors.shape == (2, 384) and host.backend_in_use in ("openvino", "onnx")
    assert host.info.precision == "f16"  # the fingerprint is the deployment's, whichever device computed it

    other = np.random.default_rng(0).normal(size=half.shape).astype(np.float32)  # a GPU whose vectors differ
    other /= np.linalg.norm(other, axis=1, keepdims=True)
    with Database(database_url) as db, db.transaction() as conn:
        model_decision.record(conn, _decision(other))
    with pytest.raises(HostCannotEmbed, match="float16|f16|differ"):
        Embedder(default_model_path(), decisions=RecordedDecisions(database_url), device="cpu").embed(["x"])


def _verdict(passed: bool, seconds: float) -> Verdict:
    return Verdict(min_cosine=0.9999, recall_at_5=1.0, recall_at_10=1.0, reference_recall_at_5=1.0,
                   reference_recall_at_10=1.0, top10_overlap=1.0, seconds=seconds, reference_seconds=2.0,
                   failures=() if passed else ("min cosine to float32 0.9 < 0.98",))


def test_float16_is_chosen_on_cuda_by_the_same_rules():
    faster = [Evaluation(CUDA_F16, _verdict(True, 1.0))]
    assert choose("auto", faster, "auto", cuda=True).candidate == CUDA_F16
    assert choose("f32", faster, "auto", cuda=True).candidate == CUDA_F32
    assert choose("auto", [Evaluation(CUDA_F16, _verdict(False, 1.0))], "auto", cuda=True).candidate == CUDA_F32
    assert choose("auto", [Evaluation(CUDA_F16, _verdict(True, 1.99))], "auto", cuda=True).candidate == CUDA_F32
    int8 = choose("int8", faster, "auto", cuda=True)
    assert int8.candidate == CUDA_F32 and "not available on CUDA" in int8.warning
    on_cpu = choose("f16", [], "auto")
    assert on_cpu.candidate.runtime == "openvino" and "float16 runs on CUDA only" in on_cpu.warning


def test_the_embedding_steps_go_to_their_own_celery_queue_and_a_workers_queues_say_whether_it_embeds(capsys):
    """Every op of the embedding graph (plan, shares, finish), and no other step, carries the queue ``embedding``
    whatever the environment (the definitions never read a queue); a worker takes every step by default, and
    ``--queue`` picks its role. The deprecated ``INGESTION_EMBEDDING_QUEUE`` keeps an old deployment's workers in
    their roles, with a warning."""
    from dagster_celery.tags import DAGSTER_CELERY_QUEUE_TAG

    from ingestion_pipeline.cli.worker import worker_queues
    from ingestion_pipeline.definitions import defs
    from ingestion_pipeline.runtime.executor import CELERY_QUEUE_TAG

    assert CELERY_QUEUE_TAG == DAGSTER_CELERY_QUEUE_TAG
    d = defs()
    tags = {n: [dict(op.tags) for op in d.get_assets_def(n).node_def.iterate_op_defs()]
            for n in ("document_chunks", "document_embeddings", "promoted_documents")}
    assert {op.get(CELERY_QUEUE_TAG) for op in tags["document_embeddings"]} == {"embedding"}
    assert not any(CELERY_QUEUE_TAG in op for op in tags["document_chunks"] + tags["promoted_documents"])

    assert worker_queues(None) == ["dagster", "embedding"]
    assert worker_queues(["embedding"]) == ["embedding"]
    assert worker_queues(["embedding", "dagster,embedding"]) == ["embedding", "dagster"]
    assert capsys.readouterr().err == ""
    # a deployment of the old variable: its GPU workers' --queue gpu embeds (and empties the old queue, where runs
    # started before the upgrade sent their steps), its plain workers do not
    assert worker_queues(["gpu"], "gpu") == ["gpu", "embedding"]
    assert worker_queues(None, "gpu") == ["dagster"]
    assert worker_queues(["dagster,gpu"], " gpu ") == ["dagster", "gpu", "embedding"]
    assert worker_queues(None, "dagster") == ["dagster", "embedding"]  # its embedding steps were dagster's own
    assert worker_queues(["embedding"], "embedding") == ["embedding"]  # the old name was already the new one
    assert worker_queues(["dagster,embedding"], "embedding") == ["dagster", "embedding"]
    said = capsys.readouterr().err
    assert "INGESTION_EMBEDDING_QUEUE is deprecated" in said and "no step goes to" not in said
    # a GPU host's worker upgraded without the variable: its queue now takes nothing, and it says so
    assert worker_queues(["gpu"]) == ["gpu"]
    assert "no step goes to the queue(s) gpu" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--queue takes Celery queue names"):
        worker_queues(["gpu; rm -rf /"])
