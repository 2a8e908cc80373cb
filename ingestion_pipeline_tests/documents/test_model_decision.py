"""One model decision per deployment: recorded once, read by every process, and a host that cannot compute the
recorded vectors refuses to embed instead of writing vectors under another fingerprint."""

from __future__ import annotations

import dataclasses

import dagster as dg
import numpy as np
import pytest

from ingestion_pipeline import services
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.documents import model_decision, model_prepare
from ingestion_pipeline.documents.embedding import default_model_path, model_info
from ingestion_pipeline.documents.model_decision import HOST_MIN_COSINE, HostCannotEmbed, ModelDecision
from ingestion_pipeline.documents.onnx_encoder import PROBE_TEXTS
from ingestion_pipeline.documents.precision import Candidate
from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch, shared_embedder, submit, table


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _another_hosts_probes(seed: int = 1) -> np.ndarray:
    """Probe vectors as a host whose kernels round otherwise would compute them: each a little off this host's
    (cosine ~0.99: inside the quality gate, outside the agreement two hosts must have)."""
    mine = shared_embedder().embed(PROBE_TEXTS)
    noise = np.random.default_rng(seed).normal(size=mine.shape).astype(np.float32)
    noise -= (noise * mine).sum(axis=1, keepdims=True) * mine  # orthogonal to each vector
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    theirs = mine * 0.99 + noise * np.sqrt(1 - 0.99**2)
    return theirs.astype(np.float32)


def _record(database, candidate: Candidate, probes: np.ndarray | None) -> ModelDecision:
    info = model_info(default_model_path())
    with database.transaction() as conn:
        return model_decision.record(conn, ModelDecision(info.digest, info.name, candidate, candidate.precision,
                                                         "prepare", probe_vectors=probes))


def test_without_a_decision_the_first_process_records_float32_and_every_later_one_reads_it(database, db):
    first = services.embedder(load_settings(), database_url=database.url)
    assert first.info.precision == "f32"
    [row] = table(db, "SELECT precision, decided_by, probe_vectors IS NULL AS no_probes FROM model_decisions")
    assert row == {"precision": "f32", "decided_by": "default", "no_probes": True}
    first.embed(["loads the model"])  # the first host to load it keeps its probe vectors with the decision
    assert table(db, "SELECT probe_vectors IS NOT NULL AS kept FROM model_decisions")[0]["kept"]
    second = services.embedder(load_settings(), database_url=database.url)
    second.embed(["a second host agrees with the first"])
    assert services.fingerprint(load_settings(), second) == services.fingerprint(load_settings(), first)
    assert len(table(db, "SELECT * FROM model_decisions")) == 1


def test_a_host_override_of_the_precision_follows_the_recorded_decision(database, monkeypatch):
    """INGESTION_EMBEDDING_PRECISION on one host is a request for `model prepare`, not a decision of its own:
    the host embeds as recorded, so its versions carry the deployment's one fingerprint."""
    _record(database, Candidate("f32", "openvino", "model.onnx"), None)
    monkeypatch.setenv("INGESTION_EMBEDDING_PRECISION", "int8")
    overridden = services.embedder(load_settings(), database_url=database.url)
    assert overridden.info.precision == "f32" and overridden.choice.candidate.precision == "f32"
    with pytest.raises(ValueError, match="--precision int8 --change"):
        model_prepare.prepare(database, load_settings(), precision="int8")


def test_a_host_that_cannot_compute_the_recorded_vectors_refuses_and_writes_none(database, db, instance,
                                                                                  corpus_dir):
    """Two hosts, one deployment: the decision (and its probe vectors) came from another CPU. This host's
    vectors differ, so its embed step fails with the decision named, the files stay held for a host that can,
    and no vector is written under any fingerprint."""
    _record(database, Candidate("f32", "openvino", "model.onnx"), _another_hosts_probes())
    here = services.embedder(load_settings(), database_url=database.url)
    with pytest.raises(HostCannotEmbed) as refused:
        here.embed(["anything"])
    assert f"< {HOST_MIN_COSINE}" in str(refused.value) and "float32" not in str(refused.value)
    assert "runs in f32 on openvino" in str(refused.value)
    assert "model prepare --precision f32 --change" in refused.value.suggestion

    submit(database, "acme", corpus_dir / "documents" / "codeblock.md")
    [key] = batch_queued(database)
    result = materialize_batch(instance, key, raise_on_error=False, resources={"embedder": here})
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "document_embeddings.plan_shares"  # in one process, the batch's encoding
    assert "cannot embed as the deployment decided" in failure.step_failure_data.error.to_string()
    assert table(db, "SELECT count(*) AS n FROM chunk_embeddings")[0]["n"] == 0
    assert table(db, "SELECT count(*) AS n FROM document_versions")[0]["n"] == 0
    [row] = table(db, "SELECT status FROM ingestion_runs")
    assert row["status"] != "failed"  # the file is not at fault: it waits for a host that can embed it


def test_a_recorded_reduced_precision_this_host_cannot_run_is_refused(database, monkeypatch):
    """A bfloat16 decision on a host whose OpenVINO cannot compute in bfloat16 (or whose vectors differ), or
    on a host configured for torch: refused by name, never float32 in its place."""
    _record(database, Candidate("bf16", "openvino", "model.onnx"), _another_hosts_probes(seed=2))
    here = services.embedder(load_settings(), database_url=database.url)
    assert here.info.precision == "bf16"  # the deployment's fingerprint, whatever this host can do
    with pytest.raises(HostCannotEmbed, match="runs in bf16 on openvino"):
        here.embed(["anything"])
    monkeypatch.setenv("INGESTION_EMBEDDING_BACKEND", "torch")
    torch_host = services.embedder(load_settings(), database_url=database.url)
    with pytest.raises(HostCannotEmbed, match="INGESTION_EMBEDDING_BACKEND=torch runs float32 only"):
        torch_host.embed(["anything"])


def test_prepare_records_once_keeps_it_and_a_change_supersedes_it_and_queues_the_reindex(database, db, instance,
                                                                                          corpus_dir):
    first = model_prepare.prepare(database, load_settings(), precision="f32")
    assert first.outcome == "recorded" and first.decision.decided_by == "prepare"
    assert first.decision.probe_vectors is not None  # this host's, kept for the next hosts to compare with
    again = model_prepare.prepare(database, load_settings())
    assert again.outcome == "kept" and again.decision.decision_id == first.decision.decision_id

    embedder = services.embedder(load_settings(), database_url=database.url)
    submit(database, "acme", corpus_dir / "documents" / "codeblock.md")
    for key in batch_queued(database):
        materialize_batch(instance, key, resources={"embedder": embedder})
    [version] = table(db, "SELECT pipeline_fingerprint FROM document_versions WHERE is_active")
    assert version["pipeline_fingerprint"] == first.decision.fingerprint

    # an explicit, recorded change (here to another record of the same model) re-indexes what it changes
    info = model_info(default_model_path())
    int8 = Candidate("int8", "onnx", "model.int8.onnx")
    with database.transaction() as conn:
        model_decision.record(conn, ModelDecision(info.digest, info.name, int8, "int8", "prepare"))
    changed = model_prepare.prepare(database, load_settings(), precision="f32", change=True)
    assert changed.outcome == "changed" and changed.previous.candidate == int8
    history = model_prepare.history(database, load_settings())
    assert [d.candidate.precision for d in history] == ["f32", "int8", "f32"]
    assert sum(d.decided_at is not None for d in history) == 3
    assert len(table(db, "SELECT * FROM model_decisions WHERE superseded_at IS NULL")) == 1
    # the versions were made under f32 and are f32 again: nothing to re-index
    assert changed.reindex_queued == 0


@pytest.mark.integration
def test_model_prepare_and_show_on_the_command_line(database_url, project_dagster_home):
    [prepared] = json_lines(run_cli("model", "prepare", "--precision", "f32", "--json").stdout)
    assert prepared["outcome"] == "recorded" and prepared["precision"] == "f32" and prepared["host_check"]
    refused = run_cli("model", "prepare", "--precision", "int8", check=False)
    assert refused.returncode == 2 and "--precision int8 --change" in refused.stderr
    shown = json_lines(run_cli("model", "show", "--json").stdout)
    assert [r["precision"] for r in shown] == ["f32"]


@pytest.mark.integration
def test_the_command_line_exits_5_naming_the_decision_when_this_host_cannot_embed(database, db, project_dagster_home,
                                                                                  corpus_dir):
    _record(database, Candidate("f32", "openvino", "model.onnx"), _another_hosts_probes(seed=3))
    for command in (("search", "anything", "--tenant", "acme"),
                    ("ingest", str(corpus_dir / "documents" / "codeblock.md"), "--tenant", "acme")):
        refused = run_cli(*command, check=False)
        assert refused.returncode == model_decision.EXIT_CODE == 5, (command, refused.stderr[-2000:])
        assert "cannot embed as the deployment decided" in refused.stderr
        assert "model prepare --precision f32 --change" in refused.stderr
    assert table(db, "SELECT count(*) AS n FROM chunk_embeddings")[0]["n"] == 0
    # the host, not the file, is at fault: the file waits for a host that can, no attempt spent, not retried
    # here into a dead letter
    [row] = table(db, "SELECT status, attempts, owner FROM ingestion_runs")
    assert row == {"status": "queued", "attempts": 0, "owner": None}
    history = table(db, "SELECT event, message FROM ledger_history WHERE kind = 'document' ORDER BY history_id")
    assert [h["event"] for h in history] == ["claimed", "host_cannot_embed"]
    assert "cannot embed as the deployment decided" in history[-1]["message"]


def test_a_decision_round_trips_its_probe_vectors(database):
    probes = np.arange(12, dtype=np.float32).reshape(3, 4)
    made = _record(database, Candidate("f32", "onnx", "model.onnx"), probes)
    assert np.array_equal(made.probe_vectors, probes) and made.candidate.runtime == "onnx"
    again = dataclasses.replace(made, probe_vectors=None)
    assert again.as_record()["host_check"] is False
