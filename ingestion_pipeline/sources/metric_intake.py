"""Metric files from an S3 source of kind `metrics`: each new or changed object becomes a metric upload."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.metrics.uploads import submit_metric_file
from ingestion_pipeline.sources.registry import Source
from ingestion_pipeline.sources.sync import MetricIntake


def s3_metric_intake(db: Database, store: UploadStore, client: Any, *, max_bytes: int,
                     valid_threshold: float) -> MetricIntake:
    def intake(source: Source, key: str) -> tuple[str, str | None]:
        response = client.get_object(Bucket=source.bucket, Key=key)
        body = response["Body"]
        try:
            result = submit_metric_file(
                db, store, workspace_id=source.tenant_id, platform=source.platform or "",
                filename=PurePosixPath(key).name, stream=body, max_bytes=max_bytes, valid_threshold=valid_threshold,
                source_id=source.source_id, source_key=key,
            )
        finally:
            body.close()
        if result.status == "rejected":
            return "failed", result.reason
        return "active", result.reason  # pending, or a duplicate of an earlier upload (reason says which)

    return intake
