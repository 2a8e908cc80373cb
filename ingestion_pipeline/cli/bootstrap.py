"""What every command does first: find the databases and the Dagster instance, apply the schema, and
hand the command one ``Context`` (database pool, settings, stores, the embedding model on demand)."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property

import psycopg

from ingestion_pipeline.core.db import Database, resolve_dagster_storage_url, resolve_database_url
from ingestion_pipeline.core.migrations import apply_migrations, check_schema
from ingestion_pipeline.core.settings import Settings, instance_home, load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.fingerprint import fingerprint_for, pipeline_fingerprint


class Context:
    """One command's view of the system; closes its connection pool when the command ends."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url = url
        self.settings = settings
        self.db = Database(url)

    @cached_property
    def embedder(self) -> Embedder:
        """The embedding model (read from its folder; weights load on the first embed)."""
        from ingestion_pipeline.documents.embedding import build_embedder

        return build_embedder()

    @property
    def fingerprint(self) -> str:
        chunk = self.settings.chunk
        return pipeline_fingerprint(self.embedder.info, chunk.target_tokens, chunk.max_tokens)

    @property
    def fingerprint_for(self) -> Callable[[str | None], str | None]:
        """extractor version of stored elements -> the fingerprint re-indexing them now gives."""
        chunk = self.settings.chunk
        return fingerprint_for(self.embedder.info, chunk.target_tokens, chunk.max_tokens)

    @property
    def document_store(self) -> LocalUploadStore:
        return LocalUploadStore(self.settings.upload.upload_dir)

    @property
    def metric_store(self) -> LocalUploadStore:
        return LocalUploadStore(self.settings.metrics.upload_dir)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *_exc) -> None:
        self.db.close()


def bootstrap() -> Context:
    """Resolve databases (the embedded server when DATABASE_URL is unset), point Dagster at the project's
    instance, and check the schema: the CLI migrates the embedded database it manages itself; another
    database must be migrated explicitly (`ingestion-pipeline db migrate`), so a command refuses to work on
    an older schema (``SchemaOutOfDate``, exit code 4)."""
    os.environ.setdefault("DAGSTER_HOME", str(instance_home()))
    embedded = not os.environ.get("DATABASE_URL")
    url = resolve_database_url(allow_embedded=True)
    resolve_dagster_storage_url(allow_embedded=True)
    if embedded:
        apply_migrations(url)
    else:
        with psycopg.connect(url) as conn:
            check_schema(conn)
    return Context(url, load_settings())
