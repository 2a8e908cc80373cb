"""Metric assets on `metric_uploads`: raw file -> staged rows -[blocking threshold check]-> promoted tables."""

import dagster as dg

from ingestion_pipeline.defs.partitions import metric_uploads
from ingestion_pipeline.defs.resources import PostgresResource
from ingestion_pipeline.metrics import pipeline
from ingestion_pipeline.metrics.pipeline import UploadFailed

GROUP = "metrics"


def _fail(exc: UploadFailed) -> dg.Failure:
    # A data problem: retrying the run cannot fix it.
    return dg.Failure(description=str(exc), allow_retries=False)


@dg.asset(partitions_def=metric_uploads, group_name=GROUP, kinds={"postgres"})
def raw_metric_files(context: dg.AssetExecutionContext, postgres: PostgresResource) -> dg.MaterializeResult:
    """The uploaded export, verified against its SHA-256; the upload moves to `processing`."""
    try:
        upload = pipeline.claim_upload(postgres.db, context.partition_key, context.run.run_id)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    return dg.MaterializeResult(metadata={
        "upload_id": upload["upload_id"], "workspace_id": upload["workspace_id"], "platform": upload["platform"],
        "filename": upload["filename"], "format": upload["file_format"], "size_bytes": upload["size_bytes"],
        "status": upload["status"],
    })


@dg.asset(
    partitions_def=metric_uploads,
    group_name=GROUP,
    deps=[raw_metric_files],
    kinds={"postgres"},
    check_specs=[dg.AssetCheckSpec("valid_row_threshold", asset="staged_metric_rows", blocking=True,
                                   description="valid rows >= the threshold (90 % by default) unless force-partial")],
)
def staged_metric_rows(context: dg.AssetExecutionContext, postgres: PostgresResource) -> dg.MaterializeResult:
    """Every row normalised, classified, keyed and validated in `staging_rows` (COPY, bounded memory)."""
    try:
        upload, counts = pipeline.stage(postgres.db, context.partition_key)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    threshold = pipeline.evaluate_threshold(postgres.db, context.partition_key)
    if not threshold.passed:
        context.log.warning(f"upload {upload['upload_id']}: {threshold.describe()}")
    return dg.MaterializeResult(
        metadata={"upload_id": upload["upload_id"], "rows": counts.total, "valid_rows": counts.valid,
                  "invalid_rows": counts.invalid, "resumed_after_row": counts.resumed_after},
        check_results=[dg.AssetCheckResult(
            check_name="valid_row_threshold", passed=threshold.passed,
            metadata={"valid_ratio": threshold.valid_ratio, "threshold": threshold.threshold,
                      "forced": threshold.forced, "summary": threshold.describe()},
        )],
    )


@dg.asset(partitions_def=metric_uploads, group_name=GROUP, deps=[staged_metric_rows], kinds={"postgres"})
def promoted_metrics(context: dg.AssetExecutionContext, postgres: PostgresResource) -> dg.MaterializeResult:
    """Campaigns, ad sets, ads and daily metrics upserted in one transaction; one completion event."""
    try:
        result = pipeline.promote(postgres.db, context.partition_key)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    return dg.MaterializeResult(metadata={
        "status": result.status, "promoted_rows": result.promoted_rows, "invalid_rows": result.invalid_rows,
        "unpromotable_rows": result.unpromotable_rows, "event_created": result.event_created,
        **{f"upserted_{k}": v for k, v in result.upserted.items()},
    })


metric_upload_job = dg.define_asset_job(
    "metric_upload_job",
    selection=dg.AssetSelection.assets(raw_metric_files, staged_metric_rows, promoted_metrics),
    description="Stage, validate and promote one ad-platform metric upload.",
)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(assets=[raw_metric_files, staged_metric_rows, promoted_metrics], jobs=[metric_upload_job])
