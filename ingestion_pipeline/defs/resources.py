"""Resources: the application database and the configured document pipeline.

Both default to the environment (``DATABASE_URL`` or the embedded Postgres; ``INGESTION_*``), so the
same code location serves `make dev`, `ingestion-pipeline process` and production.
"""


import dataclasses
import threading

import dagster as dg
from dagster_aws.s3 import S3Resource
from pydantic import Field

from ingestion_pipeline.core.db import resolve_database_url
from ingestion_pipeline.core.migrations import ensure_schema
from ingestion_pipeline.core.settings import Settings, load_settings
from ingestion_pipeline.documents.pipeline import DocumentPipeline

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


def s3_client_factory(s3: S3Resource):
    """endpoint URL -> boto3 client: the configured S3Resource, with a source's own endpoint when it has one.

    Unset fields fall back to the standard AWS environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID …).
    """

    def client_for(endpoint_url: str | None):
        if not endpoint_url or endpoint_url == s3.endpoint_url:
            return s3.get_client()
        return S3Resource(
            endpoint_url=endpoint_url, region_name=s3.region_name, aws_access_key_id=s3.aws_access_key_id,
            aws_secret_access_key=s3.aws_secret_access_key, aws_session_token=s3.aws_session_token,
            max_attempts=s3.max_attempts, profile_name=s3.profile_name,
        ).get_client()

    return client_for


def default_resources() -> dict:
    return {"postgres": PostgresResource(), "document_pipeline": DocumentPipelineResource(), "s3": S3Resource()}


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(resources=default_resources())
