"""Daily cleanup of metric staging rows older than the retention period (7 days by default)."""

import dagster as dg

from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.metrics.cleanup import delete_old_staging_rows


class StagingCleanupConfig(dg.Config):
    retention_days: int | None = None  # default: INGESTION_STAGING_RETENTION_DAYS or 7


@dg.op
def delete_expired_staging_rows(
    context: dg.OpExecutionContext, config: StagingCleanupConfig, postgres: PostgresResource,
    settings: SettingsResource,
) -> int:
    days = config.retention_days or settings.get().metrics.staging_retention_days
    with postgres.db.transaction() as conn:
        deleted = delete_old_staging_rows(conn, days)
    context.log.info(f"deleted {deleted} staging rows older than {days} days")
    return deleted


@dg.job(description="Delete metric staging rows past retention; promoted tables are never touched.")
def staging_cleanup_job():
    delete_expired_staging_rows()


staging_cleanup_schedule = dg.ScheduleDefinition(
    job=staging_cleanup_job, cron_schedule="15 3 * * *", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily at 03:15: delete metric staging rows past retention (promoted tables are never touched).",
)

