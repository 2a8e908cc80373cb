"""What every command does first: find the databases, the Dagster instance, the schema."""

from __future__ import annotations

import os

from ingestion_pipeline.core.settings import project_root


def bootstrap() -> str:
    """Resolve databases, point Dagster at the project's instance, apply migrations; return the app URL."""
    from ingestion_pipeline.core.db import resolve_dagster_storage_url, resolve_database_url
    from ingestion_pipeline.core.migrations import ensure_schema

    os.environ.setdefault("DAGSTER_HOME", str(project_root()))
    url = resolve_database_url()
    resolve_dagster_storage_url()
    ensure_schema(url)
    return url


def document_pipeline(url: str):
    from ingestion_pipeline.defs.resources import DocumentPipelineResource

    return DocumentPipelineResource().pipeline(url)
