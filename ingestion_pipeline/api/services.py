"""What the API's handlers share: one database pool, settings, the stores, the model and S3 clients.

Built once per app (``create_app``) and swappable in tests, like the Dagster resources.
"""

from __future__ import annotations

import threading
import time
from functools import cached_property
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.s3_clients import ClientsByEndpoint, S3ClientSettings, build_client
from ingestion_pipeline.core.settings import ApiSettings, Settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.fingerprint import pipeline_fingerprint

SYNC_SLOTS = 2
SYNC_MARK_SECONDS = 600.0


class ApiServices:
    def __init__(self, db: Database, settings: Settings, api: ApiSettings, *, embedder: Embedder | None = None,
                 s3_client_factory: Any = None) -> None:
        self.db = db
        self.settings = settings
        self.api = api
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        # the pipeline's one client factory (the sensor's and the fetch threads' retry policy) unless a test gives one
        self._s3_clients = ClientsByEndpoint(
            s3_client_factory or (lambda endpoint_url: build_client(S3ClientSettings(endpoint_url=endpoint_url))))
        # "Sync now" listings run after the response: one per source at a time, at most SYNC_SLOTS at once.
        # Each holds two pooled connections while it lists (the source's lock and the work), so a burst of
        # them must not take the connections requests need (a request waits at most 5 s, then 503).
        self.sync_slots = threading.BoundedSemaphore(SYNC_SLOTS)
        self._syncing: dict[int, float] = {}  # source id -> when its listing was started
        self._syncing_lock = threading.Lock()

    def begin_sync(self, source_id: int) -> bool:
        """Mark the source as being listed in the background; False if it already is (nothing to start).
        A mark older than SYNC_MARK_SECONDS is ignored (a task that never ran, e.g. the client went away)."""
        with self._syncing_lock:
            started = self._syncing.get(source_id)
            if started is not None and time.monotonic() - started < SYNC_MARK_SECONDS:
                return False
            self._syncing[source_id] = time.monotonic()
            return True

    def end_sync(self, source_id: int) -> None:
        with self._syncing_lock:
            self._syncing.pop(source_id, None)

    @property
    def embedder(self) -> Embedder:
        with self._embedder_lock:
            if self._embedder is None:
                from ingestion_pipeline.documents.embedding import build_embedder

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
        return self._s3_clients(endpoint_url)

    def upload_s3_client(self) -> Any:
        return self.s3_client(self.api.upload_s3_endpoint)
