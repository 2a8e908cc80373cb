"""The services a process builds from its settings: the upload stores, the embedding model, the pipeline's
fingerprint and S3 clients.

Each is made here and only here. The CLI (``cli/bootstrap.Context``) and the HTTP API
(``api/services.ApiServices``) extend ``Services``; the Dagster resources (``defs/resources.py``) call the
same functions from their own configuration. A test swaps one by passing it in (``embedder=``,
``s3_client_factory=``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ingestion_pipeline.core.db import embedded_allowed, resolve_database_url
from ingestion_pipeline.core.s3_clients import ClientsByEndpoint, S3ClientSettings, build_client
from ingestion_pipeline.core.s3_upload_store import S3UploadStore, parse_s3_uri
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import LocalUploadStore, UploadStore
from ingestion_pipeline.documents.embedding import Embedder, build_embedder
from ingestion_pipeline.documents.fingerprint import fingerprint_for, pipeline_fingerprint
from ingestion_pipeline.documents.model_decision import RecordedDecisions
from ingestion_pipeline.documents.serving_models import QueryEmbedders


def _s3_store(settings: Settings, part: str) -> S3UploadStore:
    bucket, prefix = parse_s3_uri(settings.upload.store_uri or "")
    client = s3_client(settings.upload.store_endpoint_url)
    return S3UploadStore(client, bucket, f"{prefix}{part}", scratch_dir=settings.upload.upload_dir)


def document_store(settings: Settings) -> UploadStore:
    """Where uploaded documents wait for processing: ``INGESTION_UPLOAD_STORE``'s ``documents/``, or the folder
    ``INGESTION_UPLOAD_DIR``."""
    if settings.upload.store_uri:
        return _s3_store(settings, "documents")
    return LocalUploadStore(settings.upload.upload_dir)


def metric_store(settings: Settings) -> UploadStore:
    """Where uploaded metric exports wait: ``INGESTION_UPLOAD_STORE``'s ``metrics/``, or the folder
    ``INGESTION_METRICS_UPLOAD_DIR``."""
    if settings.upload.store_uri:
        return _s3_store(settings, "metrics")
    return LocalUploadStore(settings.metrics.upload_dir)


def embedder(settings: Settings, model_path: str | None = None, batch_size: int | None = None,
             database_url: str | None = None, threads: int | None = None) -> Embedder:
    """The embedding model of the settings (or of ``model_path`` / ``batch_size``), run as the deployment's
    recorded decision says (read from ``database_url``, else DATABASE_URL or the embedded server, when first
    needed); weights load on first use."""
    return build_embedder(model_path, batch_size, settings=settings.embedding,
                          decisions=recorded_decisions(database_url), threads=threads)


def recorded_decisions(database_url: str | None = None) -> RecordedDecisions:
    """The deployment's model decision in ``database_url`` (else DATABASE_URL or the embedded server, resolved
    when first read)."""
    return RecordedDecisions(database_url or _database_url)


def _database_url() -> str:
    return resolve_database_url(allow_embedded=embedded_allowed())


def query_embedders(settings: Settings, current: Embedder, database_url: str | None = None) -> QueryEmbedders:
    """``current`` for its own model's vectors, and older models (registered in ``database_url``, else
    DATABASE_URL or the embedded server) loaded when a search meets versions still holding their vectors."""

    def connect() -> psycopg.Connection:
        return psycopg.connect(database_url or _database_url(), autocommit=True, row_factory=dict_row)

    return QueryEmbedders(current, connect, lambda path: embedder(settings, model_path=path, database_url=database_url,
                                                                  threads=current.threads))


def fingerprint(settings: Settings, model: Embedder) -> str:
    """What the pipeline's output depends on now: extractor, chunking budgets, model (a change means re-index)."""
    return pipeline_fingerprint(model.info, settings.chunk.target_tokens, settings.chunk.max_tokens)


def fingerprint_of_elements(settings: Settings, model: Embedder) -> Callable[[str | None], str | None]:
    """extractor version of stored elements -> the fingerprint re-indexing them now gives."""
    return fingerprint_for(model.info, settings.chunk.target_tokens, settings.chunk.max_tokens)


def s3_client(endpoint_url: str | None = None) -> Any:
    """A boto3 S3 client with the pipeline's one retry policy (``core/s3_clients``)."""
    return build_client(S3ClientSettings(endpoint_url=endpoint_url))


class Services:
    """One process's services, each built on first use and then kept (thread-safe: the API's handlers share it)."""

    embedding_threads: int | None = None  # the model's threads per call (``Embedder``); None: every core

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None,
                 s3_client_factory: Callable[[str | None], Any] | None = None, database_url: str | None = None) -> None:
        self.settings = settings
        self.database_url = database_url
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._s3_clients = ClientsByEndpoint(s3_client_factory or s3_client)

    @property
    def embedder(self) -> Embedder:
        with self._embedder_lock:
            if self._embedder is None:
                self._embedder = embedder(self.settings, database_url=self.database_url,
                                          threads=self.embedding_threads)
            return self._embedder

    @cached_property
    def query_embedders(self) -> QueryEmbedders:
        """A query's vector under each model serving active versions: this process's model, and an older one
        loaded from its registered files while a re-index under the new model runs (``serving_models.py``)."""
        return query_embedders(self.settings, self.embedder, self.database_url)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.settings, self.embedder)

    @property
    def fingerprint_for(self) -> Callable[[str | None], str | None]:
        return fingerprint_of_elements(self.settings, self.embedder)

    @cached_property
    def document_store(self) -> UploadStore:
        return document_store(self.settings)

    @cached_property
    def metric_store(self) -> UploadStore:
        return metric_store(self.settings)

    def s3_client(self, endpoint_url: str | None = None) -> Any:
        """A boto3 S3 client per endpoint (None: the AWS environment), built once (clients are thread-safe)."""
        return self._s3_clients(endpoint_url)
