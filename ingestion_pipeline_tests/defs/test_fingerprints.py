"""Staleness before any batch runs: static code versions, and `fingerprints_current` on its own."""

import dagster as dg
import pytest

from ingestion_pipeline.defs.documents.fingerprints import code_versions, fingerprint_sensor
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.documents.chunking import CHUNKER_VERSION
from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION
from ingestion_pipeline.documents.fingerprint import TOKEN_VECTORS
from ingestion_pipeline_tests.helpers import code_location, ingest, shared_embedder


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _tick(instance) -> dg.RunRequest:
    resources = {"postgres": PostgresResource(), "embedder": shared_embedder(), "settings": SettingsResource()}
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        return fingerprint_sensor(context)


def test_code_versions_are_the_codes_own_and_no_host_or_setting_changes_them(monkeypatch):
    """Every host defines the same assets: the deployment's settings and model decision are the fingerprint's
    (the sensor below), read at run time, never the code location's."""
    before = code_versions()
    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "60")
    monkeypatch.setenv("INGESTION_EMBEDDING_PRECISION", "int8")
    monkeypatch.setenv("INGESTION_EMBEDDING_MODEL", "/nowhere")
    assert code_versions() == before
    assert before["document_elements"] == f"extractor-{EXTRACTOR_VERSION}"
    chunks = f"extractor-{EXTRACTOR_VERSION}.chunker-{CHUNKER_VERSION}"
    assert before["document_chunks"] == chunks
    for name in ("document_embeddings", "promoted_documents"):  # what is kept beside each vector too
        assert before[name] == f"{chunks}.token-vectors-{TOKEN_VECTORS}"


def test_the_sensor_runs_the_check_alone_when_the_fingerprint_changes(instance, database, corpus_dir, monkeypatch):
    ingest(instance, database, "acme", corpus_dir / "documents" / "codeblock.md")
    first = _tick(instance)
    assert _tick(instance).run_key == first.run_key  # nothing changed: Dagster launches a run key once

    monkeypatch.setenv("INGESTION_CHUNK_MAX_TOKENS", "200")  # a deploy with another chunker setting
    assert _tick(instance).run_key != first.run_key  # the next tick asks for the check
    result = code_location().resolve_job_def("fingerprint_check_job").execute_in_process(instance=instance)
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == "fingerprints_current" and not check.passed
    assert check.severity == dg.AssetCheckSeverity.WARN and check.metadata["stale"].value == 1
    assert check.description.startswith("1 of 1 active versions were made by another pipeline fingerprint")
    assert not result.get_asset_materialization_events()  # the check alone: no batch was run
