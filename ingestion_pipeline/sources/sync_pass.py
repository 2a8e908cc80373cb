"""One bounded sync of several sources: what the intake service runs each round and `sync` / the API run on
demand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.sources import locations
from ingestion_pipeline.sources.metric_intake import s3_metric_intake
from ingestion_pipeline.sources.registry import list_sources, record_sync_outcome
from ingestion_pipeline.sources.sync import SyncReport, sync_source

S3ClientFor = Callable[[str | None], Any]  # endpoint URL (None: the AWS environment) -> boto3 S3 client


def sync_sources(
    db: Database, settings: Settings, s3_client_for: S3ClientFor, metric_store: UploadStore,
    *, names: list[str] | None = None, max_pages: int | None = -1,
) -> list[SyncReport]:
    """One bounded listing step for each active source (``max_pages=-1``: the per-round budget; None: a
    whole pass). Documents sources queue batch work; metrics sources turn changed objects into uploads."""
    with db.connection() as conn:
        sources = [s for s in list_sources(conn, active_only=True) if not names or s.name in names]
    reports = []
    for source in sources:
        try:  # checked at every sync: a binding removed, or a source older than the bindings, stops here
            with db.connection() as conn:
                locations.require(conn, source.tenant_id, locations.location(source.bucket, source.prefix,
                                                                             source.endpoint_url), entrance="sync",
                                  audit=False)  # the source's last_sync_error says it, every round
        except locations.LocationNotBound as exc:
            with db.connection() as conn:
                record_sync_outcome(conn, source.source_id, str(exc))
            continue
        client = s3_client_for(source.endpoint_url)
        intake = None
        max_bytes = settings.upload.max_bytes
        if source.kind == "metrics":
            max_bytes = settings.metrics.max_bytes
            intake = s3_metric_intake(db, metric_store, client, max_bytes=max_bytes,
                                      valid_threshold=settings.metrics.valid_threshold)
        reports.append(
            sync_source(
                db, source, client, max_bytes=max_bytes, page_size=settings.s3.page_size,
                max_pages=settings.s3.pages_per_tick if max_pages == -1 else max_pages, metric_intake=intake,
            )
        )
    return reports
