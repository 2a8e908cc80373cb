"""Metric assets on `metric_uploads`: raw file -> staged rows -[blocking threshold check]-> promoted tables.

Each step works only on an upload its run holds (the claim in ``raw_metric_files``): a second run of
the same upload, or a run that lost it, reports "not this run's" and changes nothing. A data problem
fails the step for good (``Failure(allow_retries=False)``); a transient error retries the step.

A person's run (materialisation, re-execution: ``launched_by_a_person``) re-drives the upload: one that
starts after ``raw_metric_files`` (from failure) claims it first, and one with nothing to do fails with the
upload's state and what to run instead. The blocking check is never reported Passed on nothing: on an upload
that failed it stays failed, on one another run holds it is not evaluated.
"""

import warnings
from collections.abc import Callable
from typing import TypeVar

import dagster as dg

from ingestion_pipeline.core.ledger import NothingToDo
from ingestion_pipeline.defs.catalog import OWNERS, table_metadata
from ingestion_pipeline.defs.partitions import metric_uploads
from ingestion_pipeline.defs.resources import HeartbeatResource, PostgresResource, SettingsResource
from ingestion_pipeline.metrics import pipeline
from ingestion_pipeline.metrics.pipeline import UploadFailed
from ingestion_pipeline.metrics.uploads import MetricUpload, error_kinds, upload_for_partition
from ingestion_pipeline.runtime.executor import ingestion_executor
from ingestion_pipeline.runtime.steps import (
    failure_for,
    first_step_run,
    launched_by_a_person,
    replays_failed,
    retrying_transient_errors,
)
from ingestion_pipeline.services import metric_store

T = TypeVar("T")
GROUP = "metrics"
STEPS = ("raw_metric_files", "staged_metric_rows", "promoted_metrics")


def _fail(exc: UploadFailed) -> dg.Failure:
    # A data problem: retrying the run cannot fix it.
    return dg.Failure(description=str(exc), allow_retries=False, metadata={"error_code": exc.code})


def _top_campaigns(postgres: PostgresResource, partition_key: str) -> dg.TableMetadataValue:
    """The promoted upload's campaigns by spend, as a table in the materialization (``read.top_campaigns``)."""
    # pandas: a part of every load of the code location if imported there (docs/benchmarks.md, "What loading
    # the code location costs")
    from ingestion_pipeline import read

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
    except NothingToDo as exc:
        raise failure_for(exc) from exc
    if result is None:
        return None, dg.MaterializeResult(metadata=_not_this_runs(postgres, context.partition_key))
    return result, None


def _not_this_runs(postgres: PostgresResource, partition_key: str) -> dict:
    with postgres.db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    holder = f" (held by run {upload.owner})" if upload.owner else ""
    return {"upload_id": upload.upload_id, "status": upload.status,
            "note": f"not worked on by this run: the upload is {upload.status}{holder}"}


def _claim(context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
           settings: SettingsResource) -> MetricUpload | None:
    return pipeline.claim_upload(postgres.db, context.partition_key, heartbeat.worker, settings.get().reliability,
                                 replay_finished=launched_by_a_person(context.run),
                                 replay_failed=replays_failed(context.run), store=metric_store(settings.get()))


def _claims_first(context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
                  name: str) -> bool:
    """A person's run that starts at ``name`` (a re-execution from failure) and no longer holds the upload (the
    run-failure sensor handed it back, or it failed) claims it first."""
    return (launched_by_a_person(context.run) and first_step_run(context.run, STEPS) == name
            and not pipeline.holds(postgres.db, context.partition_key, heartbeat.worker.owner))


def _staged(context: dg.AssetExecutionContext, postgres: PostgresResource, owner: str, settings: SettingsResource):
    """The upload's staged rows and the threshold's verdict (None, None: not this run's)."""
    policy, store = settings.get().reliability, metric_store(settings.get())
    staged = retrying_transient_errors(context, lambda: pipeline.stage(postgres.db, context.partition_key, owner,
                                                                       policy, context.log.info, store),
                                       policy.retry_backoff_seconds)
    threshold = staged and retrying_transient_errors(
        context, lambda: pipeline.evaluate_threshold(postgres.db, context.partition_key, owner, policy),
        policy.retry_backoff_seconds)
    return staged, threshold


@dg.asset(partitions_def=metric_uploads, group_name=GROUP, kinds={"postgres"}, owners=OWNERS,
          metadata=table_metadata("raw_metric_files"))
def raw_metric_files(
    context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
    settings: SettingsResource,
) -> dg.MaterializeResult:
    """The uploaded export, claimed by this run and verified against its SHA-256 (`processing`). A person's
    launch also re-drives an upload waiting for a retry or dead-lettered (a failed one with the tag
    ingestion/replay_failed=true), and fails when there is nothing to do."""
    upload, not_ours = _step(context, postgres, settings, lambda: _claim(context, postgres, heartbeat, settings))
    if not_ours:
        return not_ours
    return dg.MaterializeResult(metadata={
        "upload_id": upload.upload_id, "workspace_id": upload.workspace_id, "platform": upload.platform,
        "filename": upload.filename, "format": upload.file_format, "size_bytes": upload.size_bytes,
        "status": upload.status, "attempt": upload.attempts,
    })


# One result per upload (its partition): a check spec's partitions are a preview of Dagster 1.13, which warns at
# every load of the code location (defs/test_metric_assets.py and cli/test_dagster_dev.py read the results back).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)
    VALID_ROW_THRESHOLD = dg.AssetCheckSpec(
        "valid_row_threshold", asset="staged_metric_rows", blocking=True, partitions_def=metric_uploads,
        description="valid rows >= the threshold (90 % by default) unless force-partial")


@dg.asset(
    partitions_def=metric_uploads,
    group_name=GROUP,
    deps=[raw_metric_files],
    kinds={"postgres"},
    owners=OWNERS,
    metadata=table_metadata("staged_metric_rows"),
    check_specs=[VALID_ROW_THRESHOLD],
)
def staged_metric_rows(
    context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
    settings: SettingsResource,
) -> dg.MaterializeResult:
    """Every row normalised, classified, keyed and validated in `staging_rows` (COPY, bounded memory)."""
    owner = heartbeat.worker.owner
    try:
        if _claims_first(context, postgres, heartbeat, "staged_metric_rows"):
            _claim(context, postgres, heartbeat, settings)
        staged, threshold = _staged(context, postgres, owner, settings)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    except NothingToDo as exc:
        raise failure_for(exc) from exc
    if staged is None or threshold is None:
        return _not_staged_by_this_run(postgres, context.partition_key)
    upload, counts = staged
    if not threshold.passed:
        context.log.warning(f"upload {upload.upload_id}: {threshold.describe()}")
    invalid = _invalid_rows(postgres, upload.upload_id) if counts.invalid else {}
    return dg.MaterializeResult(
        metadata={"upload_id": upload.upload_id, "rows": counts.total, "valid_rows": counts.valid,
                  "invalid_rows": counts.invalid, "resumed_after_row": counts.resumed_after, **invalid},
        check_results=[dg.AssetCheckResult(
            check_name="valid_row_threshold", passed=threshold.passed,
            description=threshold.describe(),
            metadata={"valid_ratio": threshold.valid_ratio, "threshold": threshold.threshold,
                      "forced": threshold.forced, "summary": threshold.describe(), **invalid},
        )],
    )


def _invalid_rows(postgres: PostgresResource, upload_id: int) -> dict:
    """Why rows were invalid (as `metrics errors` prints them, by kind) and what to do about it."""
    with postgres.db.connection() as conn:
        kinds = error_kinds(conn, upload_id)
    return {
        "invalid_by_reason": dg.MetadataValue.table(
            records=[dg.TableRecord({"field": k["field"], "error": k["kind"], "rows": k["rows"]}) for k in kinds],
            schema=dg.TableSchema(columns=[dg.TableColumn("field", "string"), dg.TableColumn("error", "string"),
                                           dg.TableColumn("rows", "int")])),
        "what_to_do": f"`ingestion-pipeline metrics errors {upload_id}` lists every invalid row; fix them and submit "
                      "the file again, or submit it with --force-partial to promote its valid rows",
    }


def _not_staged_by_this_run(postgres: PostgresResource, partition_key: str) -> dg.MaterializeResult:
    """The upload is not this run's: the blocking check stays failed on a failed upload, and is a warning that
    says what the upload is doing otherwise; never Passed on nothing (promotion is skipped either way)."""
    metadata = _not_this_runs(postgres, partition_key)
    with postgres.db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    if upload.status == "failed":
        verdict = dg.AssetCheckResult(check_name="valid_row_threshold", passed=False,
                                      description=f"the upload failed: {upload.error}",
                                      metadata={"note": metadata["note"], "error_code": upload.error_code or ""})
    else:
        verdict = dg.AssetCheckResult(check_name="valid_row_threshold", passed=False,
                                      severity=dg.AssetCheckSeverity.WARN,
                                      description=f"not checked by this run: {metadata['note']}",
                                      metadata={"note": metadata["note"]})
    return dg.MaterializeResult(metadata=metadata, check_results=[verdict])


@dg.asset(partitions_def=metric_uploads, group_name=GROUP, deps=[staged_metric_rows], kinds={"postgres"},
          owners=OWNERS, metadata=table_metadata("promoted_metrics"))
def promoted_metrics(
    context: dg.AssetExecutionContext, postgres: PostgresResource, heartbeat: HeartbeatResource,
    settings: SettingsResource,
) -> dg.MaterializeResult:
    """Campaigns, ad sets, ads and daily metrics upserted in one transaction; one completion event."""
    if _claims_first(context, postgres, heartbeat, "promoted_metrics"):
        _catch_up_to_promotion(context, postgres, heartbeat, settings)
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


def _catch_up_to_promotion(context: dg.AssetExecutionContext, postgres: PostgresResource,
                           heartbeat: HeartbeatResource, settings: SettingsResource) -> None:
    """A person's re-execution from ``promoted_metrics``: claim, stage and hold to the threshold first."""
    _step(context, postgres, settings, lambda: _claim(context, postgres, heartbeat, settings))
    try:
        _, threshold = _staged(context, postgres, heartbeat.worker.owner, settings)
    except UploadFailed as exc:
        raise _fail(exc) from exc
    if threshold is not None and not threshold.passed:
        raise dg.Failure(description=f"validation threshold missed: {threshold.describe()}", allow_retries=False)


metric_upload_job = dg.define_asset_job(
    "metric_upload_job",
    selection=dg.AssetSelection.assets(raw_metric_files, staged_metric_rows, promoted_metrics),
    description="Stage, validate and promote one ad-platform metric upload.",
    executor_def=ingestion_executor,
)


@dg.definitions
def defs() -> dg.Definitions:
    assets = dg.with_source_code_references([raw_metric_files, staged_metric_rows, promoted_metrics])
    return dg.Definitions(assets=assets, jobs=[metric_upload_job])
