"""Shared test helpers: submit files and run batches through the real Dagster assets."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.settings import BatchSettings
from ingestion_pipeline.defs.documents.assets import (
    chunk_embeddings,
    document_chunks,
    document_elements,
    promoted_documents,
    raw_documents,
)
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.defs.resources import default_resources
from ingestion_pipeline.documents.batching import assign_queued_to_batches
from ingestion_pipeline.documents.intake import SubmitResult, submit_upload

DOCUMENT_ASSETS = [raw_documents, document_elements, document_chunks, chunk_embeddings, promoted_documents]


def pipeline_for(database_url: str):
    return default_resources()["document_pipeline"].pipeline(database_url)


def submit(database_url: str, tenant: str, *paths: Path, title: str | None = None) -> list[SubmitResult]:
    pipeline = pipeline_for(database_url)
    return [
        submit_upload(database_url, pipeline.store, tenant_id=tenant, path=Path(p), title=title,
                      fingerprint=pipeline.fingerprint, max_bytes=pipeline.settings.upload.max_bytes)
        for p in paths
    ]


def batch_queued(database_url: str, limits: BatchSettings | None = None) -> list[str]:
    with connect(database_url) as conn:
        return [b.partition_key for b in assign_queued_to_batches(conn, limits or BatchSettings())]


def materialize_batch(
    instance: dg.DagsterInstance, partition_key: str, *, raise_on_error: bool = True, resources: dict | None = None
) -> dg.ExecuteInProcessResult:
    if partition_key not in instance.get_dynamic_partitions(document_batches.name):
        instance.add_dynamic_partitions(document_batches.name, [partition_key])
    return dg.materialize(
        DOCUMENT_ASSETS,
        partition_key=partition_key,
        instance=instance,
        resources={**default_resources(), **(resources or {})},
        raise_on_error=raise_on_error,
    )


def ingest(instance: dg.DagsterInstance, database_url: str, tenant: str, *paths: Path) -> list[str]:
    submit(database_url, tenant, *paths)
    keys = batch_queued(database_url)
    for key in keys:
        materialize_batch(instance, key)
    return keys


def table(conn, query: str, *params) -> list[dict]:
    return conn.execute(query, params).fetchall()
