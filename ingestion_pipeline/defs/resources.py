"""Resources: the settings, the application database, the upload store, the embedding model, S3.

Each defaults to the environment (``DATABASE_URL`` or the embedded Postgres; ``INGESTION_*``), so the
same code location serves `make dev`, `ingestion-pipeline process` and production, and a test or a
deployment swaps one by passing another (hooli-style). The fields a resource uses are its configuration:
``default_resources`` fills each from ``dg.EnvVar`` where its variable is set, so the UI's resource page
says which variable configures what (Dagster shows the variable's name, never its value), and the run reads
the value when it starts. An unset variable leaves the field at the setting's own default, which the UI shows
(a number the same on every host), or empty where the default depends on the host (the embedded Postgres, a local
folder: an ``EnvVar`` of an unset variable would fail the run). A run (one process with the in-process executor)
builds its pool and its model once; a process that executes step after step or run after run (a Celery worker's,
a run worker) keeps them across steps (``runtime/kept_across_steps.py``). (boto3 sessions are cached in
``core/s3_clients``: they hold no connection, only botocore's loaded service models.)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr

from ingestion_pipeline import services
from ingestion_pipeline.core.db import Database, resolve_database_url
from ingestion_pipeline.core.leases import LeaseKeeper
from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.core.migrations import check_schema
from ingestion_pipeline.core.s3_clients import ClientsByEndpoint
from ingestion_pipeline.core.settings import (
    ApiSettings,
    BatchSettings,
    ChunkSettings,
    EmbeddingSettings,
    ReliabilitySettings,
    Settings,
    load_api_settings,
    load_settings,
)
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.pipeline import DocumentPipeline
from ingestion_pipeline.queues.redis_contract import FinalStatusWriter
from ingestion_pipeline.runtime import kept_across_steps


def _default(area: type[BaseModel], field: str) -> object:
    """A setting's own default, the same on every host: what a resource field shows in the UI until its variable
    is set (then the UI names the variable)."""
    return area.model_fields[field].get_default(call_default_factory=True)


def _overriding(value: object, default: object, current: object) -> object:
    """A resource field at the setting's own default leaves the setting as the environment gives it (read when
    the run starts); another value overrides it."""
    return current if value is None or value == default else value


class SettingsResource(dg.ConfigurableResource):
    """The code location's one settings object: the environment (``INGESTION_*``, ``docs/configuration.md``)
    read once when a run or tick sets its resources up, with these fields overriding it. Ops, assets and
    sensors take it as ``settings: SettingsResource`` and read ``settings.get()``."""

    chunk_target_tokens: int | None = Field(default=_default(ChunkSettings, "target_tokens"),
                                            description="INGESTION_CHUNK_TARGET_TOKENS")
    chunk_max_tokens: int | None = Field(default=_default(ChunkSettings, "max_tokens"),
                                         description="INGESTION_CHUNK_MAX_TOKENS")
    batch_max_files: int | None = Field(default=_default(BatchSettings, "max_files"),
                                        description="INGESTION_BATCH_MAX_FILES")
    batch_max_bytes: int | None = Field(default=_default(BatchSettings, "max_bytes"),
                                        description="INGESTION_BATCH_MAX_BYTES")
    batch_lanes: int | None = Field(default=_default(BatchSettings, "lanes"),
                                    description="Files a step works on at once: INGESTION_BATCH_LANES")
    # no bounds here: a dg.EnvVar.int stands for its value until the run resolves it; the settings check the
    # variables (INGESTION_BATCH_LANES must be ...) and _read refuses a bad value given as an argument
    _settings: Settings | None = PrivateAttr(default=None)
    _api: ApiSettings | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._settings = self._read()

    def get(self) -> Settings:
        if self._settings is None:  # used outside a run or tick (a test, a script): read it now, once
            self._settings = self._read()
        return self._settings

    def api(self) -> ApiSettings:
        """The HTTP API's settings (where presigned uploads go), read when first asked for."""
        if self._api is None:
            self._api = load_api_settings()
        return self._api

    def settings(self) -> Settings:
        """The name of ``get`` while this resource was ``DocumentPipelineResource`` (kept for callers of it)."""
        return self.get()

    def _read(self) -> Settings:
        for name in ("chunk_target_tokens", "chunk_max_tokens", "batch_max_files", "batch_max_bytes", "batch_lanes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"SettingsResource.{name} must be at least 1, got {value}")
        base = load_settings()

        def given(name: str, area: BaseModel, field: str) -> object:
            return _overriding(getattr(self, name), _default(type(area), field), getattr(area, field))

        return base.model_copy(update={
            "chunk": base.chunk.model_copy(update={
                "target_tokens": given("chunk_target_tokens", base.chunk, "target_tokens"),
                "max_tokens": given("chunk_max_tokens", base.chunk, "max_tokens")}),
            "batch": base.batch.model_copy(update={
                "max_files": given("batch_max_files", base.batch, "max_files"),
                "max_bytes": given("batch_max_bytes", base.batch, "max_bytes"),
                "lanes": given("batch_lanes", base.batch, "lanes")}),
        })


DocumentPipelineResource = SettingsResource
"""The former name of ``SettingsResource``, from when it held only the pipeline's settings (kept for code that
imports it)."""


def _settings_of(resource: SettingsResource | None) -> Settings:
    return (resource or SettingsResource()).get()


class PostgresResource(dg.ConfigurableResource):
    """The application database: one connection pool for the run or tick, on a schema this code can use."""

    database_url: str | None = Field(default=None, description="Defaults to DATABASE_URL or the embedded server")
    max_connections: int = Field(default=4, ge=1)
    _db: Database | None = PrivateAttr(default=None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[PostgresResource]:
        url = self.database_url or resolve_database_url()
        with ExitStack() as stack:
            # a Celery worker's process, a run worker: the process's pool, kept open; else the run's own
            db = (kept_across_steps.database(url, self.max_connections) if kept_across_steps.enabled()
                  else stack.enter_context(Database(url, max_size=self.max_connections)))
            with db.connection() as conn:  # one query: migrating is `ingestion-pipeline db migrate`'s job
                check_schema(conn)
            self._db = db
            yield self

    @property
    def db(self) -> Database:
        if self._db is None:
            raise RuntimeError("PostgresResource is used outside a Dagster run or tick")
        return self._db


class HeartbeatResource(dg.ConfigurableResource):
    """Keeps a run's claims alive: while the run works, a thread extends the lease of every ledger row
    the run owns and records that its worker is alive (core/leases.py). The owner is the root run, so
    a re-execution continues what its parent claimed."""

    database_url: str | None = Field(default=None, description="Defaults to DATABASE_URL or the embedded server")
    lease_seconds: float | None = Field(default=_default(ReliabilitySettings, "lease_seconds"),
                                       description="INGESTION_LEASE_SECONDS")
    settings: SettingsResource | None = None
    _worker: Worker | None = PrivateAttr(default=None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[HeartbeatResource]:
        run = context.run
        if run is None:  # not in a run (a sensor): nothing to keep alive
            yield self
            return
        url = self.database_url or resolve_database_url()
        owner = run.root_run_id or run.run_id
        policy = _settings_of(self.settings).reliability
        lease = _overriding(self.lease_seconds, _default(ReliabilitySettings, "lease_seconds"), policy.lease_seconds)
        self._worker = Worker(owner=owner, dagster_run_id=run.run_id, lease_seconds=lease,
                              max_attempts=policy.max_attempts)
        kept = kept_across_steps.lease_database(url) if kept_across_steps.enabled() else None
        with LeaseKeeper(url, dagster_run_id=run.run_id, owner=owner, lease_seconds=lease, db=kept):
            yield self

    @property
    def worker(self) -> Worker:
        if self._worker is None:
            raise RuntimeError("HeartbeatResource is used outside a Dagster run")
        return self._worker


class UploadStoreResource(dg.ConfigurableResource):
    """Where uploaded bytes wait for processing, one store for documents and one for metric exports: S3 with
    ``store_uri`` (INGESTION_UPLOAD_STORE), else local folders (INGESTION_UPLOAD_DIR, INGESTION_METRICS_UPLOAD_DIR)."""

    store_uri: str | None = Field(default=None, description="s3://bucket/prefix for both stores; default "
                                  "INGESTION_UPLOAD_STORE, else the local folders")
    store_endpoint_url: str | None = Field(default=None, description="The store's S3 endpoint; default "
                                           "INGESTION_UPLOAD_STORE_ENDPOINT_URL")
    documents_dir: str | None = Field(default=None, description="Local documents folder; default "
                                      "INGESTION_UPLOAD_DIR")
    metrics_dir: str | None = Field(default=None, description="Local metric exports folder; default "
                                    "INGESTION_METRICS_UPLOAD_DIR")
    settings: SettingsResource | None = None

    def _settings(self) -> Settings:
        base = _settings_of(self.settings)
        upload = {"store_uri": self.store_uri, "store_endpoint_url": self.store_endpoint_url,
                  "upload_dir": Path(self.documents_dir).resolve() if self.documents_dir else None}
        metrics = {"upload_dir": Path(self.metrics_dir).resolve() if self.metrics_dir else None}
        return base.model_copy(update={
            "upload": base.upload.model_copy(update={k: v for k, v in upload.items() if v is not None}),
            "metrics": base.metrics.model_copy(update={k: v for k, v in metrics.items() if v is not None})})

    def documents(self) -> UploadStore:
        return services.document_store(self._settings())

    def metrics(self) -> UploadStore:
        return services.metric_store(self._settings())


class EmbedderResource(dg.ConfigurableResource):
    """The embedding model (INGESTION_EMBEDDING_MODEL, INGESTION_EMBEDDING_BATCH_SIZE), loaded on first use.

    Assets take it as ``ResourceParam[Embedder]``. `process` hands the same Embedder to every run it executes,
    and a Celery worker process keeps its own across steps (``runtime/kept_across_steps.py``): the model loads once
    per process, not per run or per step.
    """

    model_path: str | None = None
    batch_size: int | None = Field(default=_default(EmbeddingSettings, "batch_size"),
                                   description="Texts per forward pass: INGESTION_EMBEDDING_BATCH_SIZE")
    database_url: str | None = Field(default=None, description="Where the deployment's model decision is "
                                     "read: defaults to DATABASE_URL or the embedded server")
    settings: SettingsResource | None = None

    def create_resource(self, context: dg.InitResourceContext) -> Embedder:
        if self.batch_size is not None and not 1 <= self.batch_size <= 256:
            raise ValueError(f"EmbedderResource.batch_size must be 1-256, got {self.batch_size}")
        settings = _settings_of(self.settings)
        batch_size = _overriding(self.batch_size, _default(EmbeddingSettings, "batch_size"), None)
        if kept_across_steps.enabled():
            return kept_across_steps.embedder(settings.embedding, self.model_path, batch_size, self.database_url)
        return services.embedder(settings, self.model_path, batch_size, database_url=self.database_url)


LazyS3Resource = S3Resource
"""The former name of this resource (kept for code that imports it)."""


class S3Clients(ClientsByEndpoint):
    """endpoint URL -> boto3 client, built once per endpoint from the configured S3Resource (a source's own
    endpoint gets a copy of the resource with that endpoint)."""

    def __init__(self, s3: S3Resource) -> None:
        self._default_endpoint = s3.endpoint_url

        def build(endpoint_url: str | None) -> object:
            if endpoint_url is None:
                return s3.get_client()
            return s3.model_copy(update={"endpoint_url": endpoint_url}).get_client()

        super().__init__(build)

    def __call__(self, endpoint_url: str | None):
        # a source that names the resource's own endpoint shares the resource's client
        same = not endpoint_url or endpoint_url == self._default_endpoint
        return super().__call__(None if same else endpoint_url)


def build_document_pipeline(
    postgres: PostgresResource, uploads: UploadStoreResource, embedder: Embedder,
    settings: SettingsResource, s3: S3Resource | None = None, heartbeat: HeartbeatResource | None = None,
    progress_log: Callable[[str], None] | None = None,
) -> DocumentPipeline:
    """The pipeline of one step, wired from the run's resources; progress also goes to ``progress_log``
    (the step's Dagster run log)."""
    pipeline_settings = settings.get()
    redis_url = pipeline_settings.queues.redis_url
    return DocumentPipeline(postgres.db, uploads.documents(), embedder, pipeline_settings,
                            S3Clients(s3) if s3 is not None else None,
                            worker=heartbeat.worker if heartbeat is not None else None,
                            extractor=kept_across_steps.step_extractors(pipeline_settings.limits,
                                                                         pipeline_settings.batch.lanes),
                            progress_log=progress_log,
                            # a Redis job's status says done the moment its file is promoted
                            finish_listeners=[FinalStatusWriter(postgres.db, redis_url)] if redis_url else [])


def _env(name: str, *, whole: bool = False) -> dg.EnvVar | None:
    """``dg.EnvVar(name)`` when the variable is set (see the module's note), else None: the field's default."""
    if not os.environ.get(name):
        return None
    return dg.EnvVar.int(name) if whole else dg.EnvVar(name)


def _given(**fields: object) -> dict:
    return {name: value for name, value in fields.items() if value is not None}


def postgres_resource() -> PostgresResource:
    """The application database as the code location configures it (``DATABASE_URL``)."""
    return PostgresResource(**_given(database_url=_env("DATABASE_URL")))


def default_resources() -> dict:
    """The resources every job, sensor and schedule of the code location can ask for, by key; the ones that
    need settings share the ``settings`` resource. Each field a set variable configures is its ``dg.EnvVar``."""
    settings = SettingsResource(**_given(
        chunk_target_tokens=_env("INGESTION_CHUNK_TARGET_TOKENS", whole=True),
        chunk_max_tokens=_env("INGESTION_CHUNK_MAX_TOKENS", whole=True),
        batch_max_files=_env("INGESTION_BATCH_MAX_FILES", whole=True),
        batch_max_bytes=_env("INGESTION_BATCH_MAX_BYTES", whole=True),
        batch_lanes=_env("INGESTION_BATCH_LANES", whole=True)))
    return {
        "settings": settings,
        "postgres": postgres_resource(),
        "upload_store": UploadStoreResource(settings=settings, **_given(
            store_uri=_env("INGESTION_UPLOAD_STORE"), store_endpoint_url=_env("INGESTION_UPLOAD_STORE_ENDPOINT_URL"),
            documents_dir=_env("INGESTION_UPLOAD_DIR"), metrics_dir=_env("INGESTION_METRICS_UPLOAD_DIR"))),
        "embedder": EmbedderResource(settings=settings, **_given(
            batch_size=_env("INGESTION_EMBEDDING_BATCH_SIZE", whole=True), database_url=_env("DATABASE_URL"))),
        "s3": S3Resource(),
        "heartbeat": HeartbeatResource(settings=settings, **_given(database_url=_env("DATABASE_URL"))),
    }


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(resources=default_resources())
