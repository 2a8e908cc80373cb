"""Metric assets on `metric_uploads`: raw file -> staged rows -[blocking threshold check]-> promoted tables.

Each step works only on an upload its run holds (the claim in ``raw_metric_files``): a second run of
the same upload, or a run that lost it, reports "not this run's" and changes nothing. A data problem
fails the step for good (``Failure(allow_retries=False)``); a transient error retries the step.
"""

from collections.abc import Callable
from typing import TypeVar

import dagster as dg

from ingestion_pipeline import read
from ingestion_pipeline.defs.ledger.steps import launched_by_a_person, retrying_transient_errors
from ingestion_pipeline.defs.partitions import metric_uploads
from ingestion_pipeline.defs.resources import HeartbeatResource, PostgresResource, SettingsResource
from ingestion_pipeline.metrics import pipeline
from ingestion_pipeline.metrics.pipeline import UploadFailed
from ingestion_pipeline.metrics.uploads import upload_for_partition

T = TypeVar("T")
GROUP = "metrics"


def _fail(exc: UploadFailed) -> dg.Failure:
    # A data problem: retrying the run cannot fix it.
    return dg.Failure(description=str(exc), allow_retries=False, metadata={"error_code": exc.code})


def _top_campaigns(postgres: PostgresResource, partition_key: str) -> dg.TableMetadataValue:
    """The promoted upload's campaigns by spend, as a table in the materialization (``read.top_campaigns``)."""
    with postgres.db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    frame = read.top_campaigns(upload.workspace_id, upload.upload_id, database_url=postgres.db.url)
    columns = [("platform", "string"), ("campaign_id", "string"), ("campaign_name", "string"), ("spend", "float"),
               ("impressions", "int"), ("clicks", "int"), ("daily_rows", "int")]
    return dg.TableMetadataValue(
        schema=dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns]),
        records=[dg.TableRecord({name: _plain(row[name]) for name, _ in columns})
                 for row in frame.to_dict("records")],
    )


def _plain(value):
    """A DataFrame cell as a value Dagster's table metadata takes (numpy scalars are not)."""
    return value.item() if hasattr(value, "item") else value


def _step(context: dg.AssetExecutionContext, postgres: PostgresResource, settings: SettingsResource,
          work: Callable[[], T | None]) -> tuple[T | None, dg.MaterializeResult | None]:
    """``work()``, retried by Dagster on a transient error; an ``UploadFailed`` fails the step for good; None
    (the upload is not this run's) comes back as the result saying so."""
    try:
        result = retrying_transient_errors(context, work, settings.get().reliability.retry_backoff_seconds)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    if result is None:
        return None, dg.MaterializeResult(metadata=_not_this_runs(postgres, context.partition_key))
    return result, None


def _not_this_runs(postgres: PostgresResource, partition_key: str) -> dict:
    with postgres.db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    holder = f" (held by run {upload.owner})" if upload.owner else ""
    return {"upload_id": upload.upload_id, "status": upload.status,
            "note": f"not worked on by this run: the upload is {upload.status}{holder}"}


@dg.asset(partitions_def=metric_uploads, group_name=GROUP, kinds={"postgres"})
def raw_metric_files(
    context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
    settings: SettingsResource,
) -> dg.MaterializeResult:
    """The uploaded export, claimed by this run and verified against its SHA-256 (`processing`)."""
    upload, not_ours = _step(context, postgres, settings, lambda: pipeline.claim_upload(
        postgres.db, context.partition_key, heartbeat.worker, settings.get().reliability,
        replay_finished=launched_by_a_person(context.run)))
    if not_ours:
        return not_ours
    return dg.MaterializeResult(metadata={
        "upload_id": upload.upload_id, "workspace_id": upload.workspace_id, "platform": upload.platform,
        "filename": upload.filename, "format": upload.file_format, "size_bytes": upload.size_bytes,
        "status": upload.status, "attempt": upload.attempts,
    })


@dg.asset(
    partitions_def=metric_uploads,
    group_name=GROUP,
    deps=[raw_metric_files],
    kinds={"postgres"},
    check_specs=[dg.AssetCheckSpec("valid_row_threshold", asset="staged_metric_rows", blocking=True,
                                   description="valid rows >= the threshold (90 % by default) unless force-partial")],
)
def staged_metric_rows(
    context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
    settings: SettingsResource,
) -> dg.MaterializeResult:
    """Every row normalised, classified, keyed and validated in `staging_rows` (COPY, bounded memory)."""
    owner, policy = heartbeat.worker.owner, settings.get().reliability
    try:
        staged = retrying_transient_errors(context, lambda: pipeline.stage(postgres.db, context.partition_key,
                                                                           owner, policy, context.log.info),
                                           policy.retry_backoff_seconds)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    threshold = staged and retrying_transient_errors(
        context, lambda: pipeline.evaluate_threshold(postgres.db, context.partition_key, owner, policy),
        policy.retry_backoff_seconds)
    if staged is None or threshold is None:
        metadata = _not_this_runs(postgres, context.partition_key)
        return dg.MaterializeResult(metadata=metadata, check_results=[dg.AssetCheckResult(
            check_name="valid_row_threshold", passed=True,
            metadata={"note": metadata["note"], "checked_nothing": True})])
    upload, counts = staged
    if not threshold.passed:
        context.log.warning(f"upload {upload.upload_id}: {threshold.describe()}")
    return dg.MaterializeResult(
        metadata={"upload_id": upload.upload_id, "rows": counts.total, "valid_rows": counts.valid,
                  "invalid_rows": counts.invalid, "resumed_after_row": counts.resumed_after},
        check_results=[dg.AssetCheckResult(
            check_name="valid_row_threshold", passed=threshold.passed,
            metadata={"valid_ratio": threshold.valid_ratio, "threshold": threshold.threshold,
                      "forced": threshold.forced, "summary": threshold.describe(), "checked_nothing": False},
        )],
    )


@dg.asset(partitions_def=metric_uploads, group_name=GROUP, deps=[staged_metric_rows], kinds={"postgres"})
def promoted_metrics(
    context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
    settings: SettingsResource,
) -> dg.MaterializeResult:
    """Campaigns, ad sets, ads and daily metrics upserted in one transaction; one completion event."""
    result, not_ours = _step(context, postgres, settings,
                             lambda: pipeline.promote(postgres.db, context.partition_key, heartbeat.worker.owner,
                                                      settings.get().reliability))
    if not_ours:
        return not_ours
    return dg.MaterializeResult(metadata={
        "status": result.status, "promoted_rows": result.promoted_rows, "invalid_rows": result.invalid_rows,
        "unpromotable_rows": result.unpromotable_rows, "event_created": result.event_created,
        **{f"upserted_{k}": v for k, v in result.upserted.items()},
        "top_campaigns": _top_campaigns(postgres, context.partition_key),
    })


metric_upload_job = dg.define_asset_job(
    "metric_upload_job",
    selection=dg.AssetSelection.assets(raw_metric_files, staged_metric_rows, promoted_metrics),
    description="Stage, validate and promote one ad-platform metric upload.",
    executor_def=dg.in_process_executor,
)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(assets=[raw_metric_files, staged_metric_rows, promoted_metrics], jobs=[metric_upload_job])
