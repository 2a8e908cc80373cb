"""What the API's handlers share: one database pool, settings, the stores, the model and S3 clients.

Built once per app (``create_app``) and swappable in tests, like the Dagster resources.
"""

from __future__ import annotations

import threading
from functools import cached_property
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import ApiSettings, Settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.fingerprint import pipeline_fingerprint


class ApiServices:
    def __init__(self, db: Database, settings: Settings, api: ApiSettings, *, embedder: Embedder | None = None,
                 s3_client_factory: Any = None) -> None:
        self.db = db
        self.settings = settings
        self.api = api
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._s3_client_factory = s3_client_factory
        self._s3_clients: dict[str | None, Any] = {}
        self._s3_lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        with self._embedder_lock:
            if self._embedder is None:
                from ingestion_pipeline.defs.resources import build_embedder

                self._embedder = build_embedder()
            return self._embedder

    @property
    def fingerprint(self) -> str:
        chunk = self.settings.chunk
        return pipeline_fingerprint(self.embedder.info, chunk.target_tokens, chunk.max_tokens)

    @cached_property
    def document_store(self) -> LocalUploadStore:
        return LocalUploadStore(self.settings.upload.upload_dir)

    @cached_property
    def metric_store(self) -> LocalUploadStore:
        return LocalUploadStore(self.settings.metrics.upload_dir)

    def s3_client(self, endpoint_url: str | None = None) -> Any:
        """A boto3 S3 client per endpoint (None: the AWS environment), built once (clients are thread-safe)."""
        with self._s3_lock:
            if endpoint_url not in self._s3_clients:
                if self._s3_client_factory is not None:
                    self._s3_clients[endpoint_url] = self._s3_client_factory(endpoint_url)
                else:
                    import boto3
                    from botocore.config import Config

                    # SigV4: presigned URLs carry their expiry and sign the declared size and type.
                    self._s3_clients[endpoint_url] = boto3.client(
                        "s3", endpoint_url=endpoint_url, config=Config(signature_version="s3v4"))
            return self._s3_clients[endpoint_url]

    def upload_s3_client(self) -> Any:
        return self.s3_client(self.api.upload_s3_endpoint)
