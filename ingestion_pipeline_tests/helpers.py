"""Shared test helpers: submit files and run batches through the real Dagster assets."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.migrations import apply_migrations, migration_files
from ingestion_pipeline.core.settings import BatchSettings, load_settings
from ingestion_pipeline.defs.documents.assets import (
    document_chunks,
    document_elements,
    document_embeddings,
    promoted_documents,
    raw_documents,
)
from ingestion_pipeline.defs.documents.batch_checks import promoted_batch_checks
from ingestion_pipeline.defs.documents.fingerprints import fingerprints_current
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.defs.resources import default_resources
from ingestion_pipeline.documents.batching import assign_queued_to_batches
from ingestion_pipeline.documents.embedding import Embedder, build_embedder
from ingestion_pipeline.documents.extraction.ocr import tesseract_binary
from ingestion_pipeline.documents.intake import SubmitResult, submit_upload
from ingestion_pipeline.documents.pipeline import DocumentPipeline
from ingestion_pipeline.services import document_store

# OCR tests need the system's tesseract; CI (INGESTION_REQUIRE_OCR=1, set by .ci/run) runs them regardless, so
# a machine where `make` could not install it fails them instead of skipping.
needs_tesseract = pytest.mark.skipif(
    tesseract_binary() is None
    and not os.environ.get("INGESTION_REQUIRE_OCR"),
    reason="Tesseract is not installed (make installs it where it can: apt-get install tesseract-ocr)")

DOCUMENT_ASSETS = [raw_documents, document_elements, document_chunks, document_embeddings, promoted_documents,
                   promoted_batch_checks, fingerprints_current]


@functools.cache
def shared_embedder() -> Embedder:
    """One embedding model for the whole test session (each run would otherwise load its own)."""
    return build_embedder()


def pipeline_for(database: Database) -> DocumentPipeline:
    """The document pipeline as a run builds it, with the current INGESTION_* settings."""
    settings = load_settings()
    return DocumentPipeline(database, document_store(settings), shared_embedder(), settings)


def submit(database: Database, tenant: str, *paths: Path, title: str | None = None,
           key: str | None = None) -> list[SubmitResult]:
    pipeline = pipeline_for(database)
    return [
        submit_upload(database, pipeline.store, tenant_id=tenant, path=Path(p), title=title, key=key,
                      fingerprint=pipeline.fingerprint, max_bytes=pipeline.settings.upload.max_bytes)
        for p in paths
    ]


def batch_queued(database: Database, limits: BatchSettings | None = None) -> list[str]:
    with database.connection() as conn:
        return [b.partition_key for b in assign_queued_to_batches(conn, limits or BatchSettings())]


def test_resources(**overrides) -> dict:
    """The code location's resources, sharing the session's embedding model."""
    from ingestion_pipeline.defs.step_values import STEP_VALUES, step_values_resource

    return {**default_resources(), STEP_VALUES: step_values_resource(), "embedder": shared_embedder(), **overrides}


def materialize_batch(
    instance: dg.DagsterInstance, partition_key: str, *, raise_on_error: bool = True, resources: dict | None = None,
    tags: dict[str, str] | None = None,
) -> dg.ExecuteInProcessResult:
    if partition_key not in instance.get_dynamic_partitions(document_batches.name):
        instance.add_dynamic_partitions(document_batches.name, [partition_key])
    return dg.materialize(
        DOCUMENT_ASSETS,
        partition_key=partition_key,
        instance=instance,
        resources=test_resources(**(resources or {})),
        raise_on_error=raise_on_error,
        tags=tags,
    )


def ingest(instance: dg.DagsterInstance, database: Database, tenant: str, *paths: Path,
           key: str | None = None) -> list[str]:
    submit(database, tenant, *paths, key=key)
    keys = batch_queued(database)
    for key in keys:
        materialize_batch(instance, key)
    return keys


def add_tenant_vectors(conn, tenant: str, vectors: np.ndarray, model: str = "m", *, indexed: bool = True) -> list[int]:
    """A tenant with one active version holding ``vectors`` (normalised), one chunk each; their chunk ids.
    ``indexed=False``: as promotion leaves them, outside the HNSW graph until ``vector_backlog`` takes them."""
    conn.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant,))
    doc = conn.execute("INSERT INTO documents (tenant_id, source_uri, title) VALUES (%s, %s, 'd') RETURNING doc_id",
                       (tenant, f"test://{tenant}/{uuid.uuid4().hex}")).fetchone()["doc_id"]
    version = conn.execute(
        """INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash, pipeline_fingerprint,
                                          is_active, size_bytes, chunk_count, token_count, activated_at)
           VALUES (%s, %s, 1, 'h', 'f', true, 1, %s, 1, now()) RETURNING version_id""",
        (tenant, doc, len(vectors))).fetchone()["version_id"]
    ids = []
    for i, vector in enumerate(vectors):
        chunk = conn.execute(
            """INSERT INTO chunks (tenant_id, version_id, doc_id, ordinal, text, token_count, content_hash)
               VALUES (%s, %s, %s, %s, %s, 1, 'h') RETURNING chunk_id""",
            (tenant, version, doc, i, f"{tenant} chunk {i}")).fetchone()["chunk_id"]
        vector = (vector / np.linalg.norm(vector)).astype(np.float32)
        if indexed:  # the column's default (and a database migrated before sql/044 has no such column)
            conn.execute("INSERT INTO chunk_embeddings (chunk_id, tenant_id, model, embedding) VALUES (%s, %s, %s, %s)",
                         (chunk, tenant, model, vector))
        else:
            conn.execute("INSERT INTO chunk_embeddings (chunk_id, tenant_id, model, embedding, indexed) "
                         "VALUES (%s, %s, %s, %s, false)", (chunk, tenant, model, vector))
        ids.append(chunk)
    return ids


def database_migrated_before(pg_server_url: str, folder: Path, first_left_out: str) -> str:
    """A new database migrated as an earlier release left it: every migration whose file name sorts before
    ``first_left_out`` (e.g. "038"); its URL. ``folder`` receives the copied migration files."""
    from ingestion_pipeline_tests.conftest import _create_database

    earlier = folder / "sql"
    earlier.mkdir()
    for path in migration_files():
        if path.name < first_left_out:
            shutil.copy(path, earlier / path.name)
    url = _create_database(pg_server_url, f"t_{uuid.uuid4().hex[:12]}")
    apply_migrations(url, earlier)
    return url


def table(conn, query: str, *params) -> list[dict]:
    return conn.execute(query, params).fetchall()


def code_location() -> dg.Definitions:
    """The project's definitions with the test session's shared embedding model."""
    from ingestion_pipeline.definitions import defs

    project = defs()
    return dg.Definitions(assets=project.assets, asset_checks=project.asset_checks, jobs=project.jobs,
                          sensors=project.sensors, schedules=project.schedules,
                          resources={**project.resources, "embedder": shared_embedder()})


def document_batch_job() -> dg.JobDefinition:
    """For ``dg.reconstructable``: Dagster's re-execution rebuilds the job from this function."""
    return code_location().resolve_job_def("document_batch_job")


def metric_upload_job() -> dg.JobDefinition:
    """For ``dg.reconstructable``, as ``document_batch_job``."""
    return code_location().resolve_job_def("metric_upload_job")


def process_in_process(instance: dg.DagsterInstance, database: Database) -> list:
    """What `ingestion-pipeline process` does (janitor, planning, runs, finalisation), in this process."""
    from ingestion_pipeline.defs.resources import PostgresResource
    from ingestion_pipeline.runtime.launching import run_queued_in_process

    return run_queued_in_process(instance, code_location(), database, load_settings(),
                                 {"postgres": PostgresResource(database_url=database.url),
                                  "embedder": shared_embedder()}, log_level="CRITICAL")


def history(conn, file_id: int, kind: str = "document") -> list[str]:
    return [r["event"] for r in conn.execute(
        "SELECT event FROM ledger_history WHERE kind = %s AND item_id = %s ORDER BY history_id",
        (kind, file_id)).fetchall()]


# A small knowledge base for the S3 source tests (the kb fixture puts it in a bucket).
DOCS = {
    "kb/launch.md": "# Launch\n\nProject Heron launches in Lisbon on the ninth of March.\n",
    "kb/payroll.md": "# Payroll\n\nSalaries are paid on the last working day of each month.\n",
    "kb/travel.txt": "TRAVEL POLICY\n\nEconomy class for flights under six hours; book through the portal.\n",
}


def put(client, bucket, key, body):
    client.put_object(Bucket=bucket, Key=key, Body=body.encode() if isinstance(body, str) else body)


def tiny_model(folder: Path, dimension: int = 32, seed: int = 0) -> Path:
    """A real sentence-transformers model of another dimension, made offline: one small BERT layer with
    random weights and the packaged model's tokenizer."""
    import shutil

    import torch
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers 6 moved the modules (the old path warns)
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models
    from transformers import BertConfig, BertModel

    from ingestion_pipeline.documents.embedding import default_model_path

    torch.manual_seed(seed)
    hf = folder / "hf"
    BertModel(BertConfig(vocab_size=30522, hidden_size=dimension, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(hf)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(Path(default_model_path()) / name, hf / name)
    out = folder / f"tiny-{dimension}"
    SentenceTransformer(modules=[models.Transformer(str(hf), max_seq_length=128),
                                 models.Pooling(dimension, "mean")], device="cpu").save(str(out))
    return out


def stop_process_group(proc: subprocess.Popen, first: int = signal.SIGINT) -> None:
    """Stop the process group a test started (dagster dev or a Dagster service, and what it spawned: code servers,
    run workers): ``first`` (SIGINT, as Ctrl-C), then SIGKILL to whatever of the group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, first)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


# A command's own peak memory, measured by a small parent: a child of the test process would start with the test
# process's peak (Linux carries the memory high-water mark of a process across exec), which depends on what
# earlier tests in this worker loaded, not on the command.
_PEAK_OF_A_CHILD = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
                    "sys.exit(done.returncode)")


def intake_service_until(done: Callable[[], bool], log: Path, env: dict[str, str], *args: str,
                         timeout: float = 120) -> str:
    """Run the real `ingestion-pipeline intake [args]` until ``done()``, then SIGTERM it (it must exit 0); its log.
    Fails when the service exits first or ``done()`` is still false after ``timeout`` seconds."""
    with log.open("w") as out:
        service = subprocess.Popen([str(Path(sys.executable).parent / "ingestion-pipeline"), "intake", *args],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while not done():
                assert service.poll() is None, log.read_text()
                assert time.monotonic() < deadline, f"not done after {timeout:g} s\n{log.read_text()}"
                time.sleep(0.2)
            service.send_signal(signal.SIGTERM)
            assert service.wait(30) == 0
        finally:
            if service.poll() is None:
                service.kill()
    return log.read_text()


def run_measuring_peak(command: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``command``; its result and its peak resident memory in MB (with the processes it waited for)."""
    import sys

    done = subprocess.run([sys.executable, "-c", _PEAK_OF_A_CHILD, *command], capture_output=True, text=True,
                          env=env)
    return done, int(done.stderr.strip().splitlines()[-1]) / 1024


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 now (a service started by a test is up)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False
