"""What the API's handlers share: one database pool, settings, and the services (stores, model, S3 clients).

Built once per app (``create_app``) and swappable in tests, like the Dagster resources.
"""

from __future__ import annotations

import threading
import time
from functools import cached_property, partial
from typing import Any

import numpy as np

from ingestion_pipeline import services as pipeline_services
from ingestion_pipeline.api.lowered_work import LOWER_PRIORITY_NICE, LoweredProcess
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import ApiSettings, Settings
from ingestion_pipeline.core.users import is_active
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.services import Services

SYNC_SLOTS = 2
SYNC_MARK_SECONDS = 600.0
ACTIVE_CHECK_SECONDS = 5.0


class ApiServices(Services):
    """The services (``ingestion_pipeline.services``: the pipeline's one S3 client factory and retry policy,
    unless a test gives one), the app's database pool and its API settings.

    The model embeds each search's query on the request's own thread, one thread a call: in the runtime's
    shared pool a short query waited for another tenant's long one (measured with one thread embedding
    1,000-character queries beside it), on its own thread it does not (docs/benchmarks.md, tenant_fairness.py).
    A tenant's search share (``read_slots.py``) then bounds the cores its searches take, and a search it runs
    lowered embeds its query in the lowered process (``query_vector``)."""

    embedding_threads = 1

    def __init__(self, db: Database, settings: Settings, api: ApiSettings, *, embedder: Embedder | None = None,
                 s3_client_factory: Any = None) -> None:
        super().__init__(settings, embedder=embedder, s3_client_factory=s3_client_factory,
                         database_url=getattr(db, "url", None))
        self.db = db
        self.api = api
        self._own_model = embedder is None  # a given model (a test's) is not rebuilt in another process
        # "Sync now" listings run after the response: one per source at a time, at most SYNC_SLOTS at once.
        # Each holds two pooled connections while it lists (the source's lock and the work), so a burst of
        # them must not take the connections requests need (a request waits at most 5 s, then 503).
        self.sync_slots = threading.BoundedSemaphore(SYNC_SLOTS)
        self._syncing: dict[int, float] = {}  # source id -> when its listing was started
        self._syncing_lock = threading.Lock()
        self._active: dict[str, tuple[bool, float]] = {}  # user id -> (active, when it was looked up)
        self._active_lock = threading.Lock()
        self._fast_lane: Any = None
        # imported ahead: the first upload's launch is not a second of imports
        if settings is not None and settings.executor.dagster_url not in (None, "off"):
            threading.Thread(target=self._fast_lane_module, name="fast-lane-import", daemon=True).start()

    @cached_property
    def lowered_embedding(self) -> LoweredProcess | None:
        """The lowered process that embeds the queries of searches run lowered (``lowered_work.py``); None when
        this process's model was given rather than built from the settings."""
        if not self._own_model:
            return None
        return LoweredProcess(1, "search-embedding", warm=partial(_load_query_model, self._model_build))

    @property
    def _model_build(self) -> partial:
        # built exactly as ``Services.embedder`` builds this process's model: the same files, the deployment's
        # recorded decision, the same threads a call, so the child's vectors are this process's
        return partial(pipeline_services.embedder, self.settings, database_url=self.database_url,
                       threads=self.embedding_threads)

    def query_vector(self, text: str, *, lowered: bool = False) -> np.ndarray:
        """``text``'s vector under this process's model (``query_embedding``'s first half)."""
        return self.query_embedding(text, lowered=lowered)[0]

    def query_embedding(self, text: str, *, lowered: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``text``'s vector and token vectors under this process's model (``Embedder.embed_query``); ``lowered``:
        in the lowered process once it runs (until then, or without one, on the calling thread)."""
        process = self.lowered_embedding if lowered else None
        if process is None:
            return self.embedder.embed_query(text)
        return process.call(_embed_query, self._model_build, text, here=lambda: self.embedder.embed_query(text))

    @cached_property
    def lowered_db(self) -> Database:
        """The pool of the searches run lowered: each connection's backend lowered as their threads are, where the
        database runs on this host (``cpu_priority.lower_local_backend``), so a flood's statements take the cores
        only as far as the other tenants' leave them free, as its Python does. A pool of its own, since a lowered
        backend is never raised back; opened on first use. A database given without a URL (a test's) is used as
        it is."""
        url = getattr(self.db, "url", None)
        if url is None:
            return self.db
        return Database(url, max_size=self.db.max_size, name="api-lowered", timeout=5.0,
                        backend_nice=LOWER_PRIORITY_NICE)

    def close_lowered(self) -> None:
        """End the lowered process and pool, if they were started (the app's shutdown)."""
        if "lowered_embedding" in self.__dict__ and self.lowered_embedding is not None:
            self.lowered_embedding.shutdown()
        if "lowered_db" in self.__dict__ and self.lowered_db is not self.db:
            self.lowered_db.close()

    @staticmethod
    def _fast_lane_module() -> Any:
        from ingestion_pipeline.runtime import fast_lane

        return fast_lane

    def launch_soon(self) -> None:
        """A queued small upload's run launched now through the Dagster webserver, off the request's thread
        (runtime/fast_lane.py); without a webserver URL the upload sensor launches it at its next loop."""
        fast_lane = self._fast_lane_module()
        if fast_lane.webserver_url(self.settings) is None:
            return
        with self._active_lock:
            if self._fast_lane is None:
                self._fast_lane = fast_lane.FastLane(self.db, self.settings)
        self._fast_lane.nudge()

    def user_is_active(self, user_id: str) -> bool:
        """Whether a token's user may still call (not disabled, not removed), looked up at most every
        ``ACTIVE_CHECK_SECONDS`` per user: a disabled user's tokens stop working within that time."""
        now = time.monotonic()
        with self._active_lock:
            known = self._active.get(user_id)
            if known is not None and now - known[1] < ACTIVE_CHECK_SECONDS:
                return known[0]
        with self.db.connection() as conn:
            active = is_active(conn, user_id)
        with self._active_lock:
            if len(self._active) > 100_000:  # bounded: one entry per user seen recently
                self._active.clear()
            self._active[user_id] = (active, now)
        return active

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

    def upload_s3_client(self) -> Any:
        return self.s3_client(self.api.upload_s3_endpoint)


_query_model: Embedder | None = None  # in the lowered process: the model, loaded by its first call


def _load_query_model(build) -> None:
    global _query_model
    if _query_model is None:
        model = build()
        model.embed(["warm"])  # loads the weights, checked against the deployment's decision
        _query_model = model


def _embed_query(build, text: str) -> tuple[np.ndarray, np.ndarray]:
    _load_query_model(build)
    return _query_model.embed_query(text)
