"""Resources: the application database and the configured document pipeline.

Both default to the environment (``DATABASE_URL`` or the embedded Postgres; ``INGESTION_*``), so the
same code location serves `make dev`, `ingestion-pipeline process` and production.
"""


import dataclasses
import threading

import dagster as dg
from pydantic import Field

from ingestion_pipeline.lib.db import resolve_database_url
from ingestion_pipeline.lib.document_pipeline import DocumentPipeline
from ingestion_pipeline.lib.migrations import ensure_schema
from ingestion_pipeline.lib.settings import Settings, load_settings

_pipelines: dict[tuple, DocumentPipeline] = {}
_pipelines_lock = threading.Lock()


class PostgresResource(dg.ConfigurableResource):
    """The application database; migrations are applied on first use in each process."""

    database_url: str | None = Field(default=None, description="Defaults to DATABASE_URL or the embedded server")

    def url(self) -> str:
        url = self.database_url or resolve_database_url()
        ensure_schema(url)
        return url


class DocumentPipelineResource(dg.ConfigurableResource):
    """Pipeline settings; unset fields come from INGESTION_* variables. One pipeline (and model) per process."""

    embedding_model_path: str | None = None
    embedding_batch_size: int | None = Field(default=None, le=256, ge=1)
    chunk_target_tokens: int | None = None
    chunk_max_tokens: int | None = None
    batch_max_files: int | None = None
    batch_max_bytes: int | None = None

    def settings(self) -> Settings:
        base = load_settings()
        return dataclasses.replace(
            base,
            embedding=dataclasses.replace(
                base.embedding,
                model_path=self.embedding_model_path or base.embedding.model_path,
                batch_size=self.embedding_batch_size or base.embedding.batch_size,
            ),
            chunk=dataclasses.replace(
                base.chunk,
                target_tokens=self.chunk_target_tokens or base.chunk.target_tokens,
                max_tokens=self.chunk_max_tokens or base.chunk.max_tokens,
            ),
            batch=dataclasses.replace(
                base.batch,
                max_files=self.batch_max_files or base.batch.max_files,
                max_bytes=self.batch_max_bytes or base.batch.max_bytes,
            ),
        )

    def pipeline(self, database_url: str) -> DocumentPipeline:
        settings = self.settings()
        key = (database_url, settings)
        with _pipelines_lock:
            if key not in _pipelines:
                _pipelines[key] = DocumentPipeline(database_url, settings)
            return _pipelines[key]


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(
        resources={"postgres": PostgresResource(), "document_pipeline": DocumentPipelineResource()}
    )
