"""Raw-file retention: expired bytes of finished-for-good work and orphaned stored files are removed
(core/retention.py), and so are objects of presigned uploads never completed (documents/presigned.py), hourly."""

import dagster as dg

from ingestion_pipeline.core.retention import remove_expired_raw_files, remove_orphans
from ingestion_pipeline.defs.resources import PostgresResource, S3Clients, SettingsResource, UploadStoreResource
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.documents import presigned, staging


@dg.op(description="Remove raw bytes past INGESTION_FAILED_TTL_DAYS and orphans past INGESTION_ORPHAN_TTL_HOURS.")
def remove_expired_raw_bytes(
    context: dg.OpExecutionContext, postgres: PostgresResource, upload_store: UploadStoreResource, s3: S3Resource,
    settings: SettingsResource,
) -> int:
    policy = settings.get().reliability
    stores = [upload_store.documents(), upload_store.metrics()]
    report = remove_expired_raw_files(postgres.db, policy, stores)
    remove_orphans(postgres.db, stores, policy, report)
    context.log.info(report.describe())
    with postgres.db.transaction() as conn:
        staged = staging.remove_expired(conn, policy.failed_ttl_days)
    context.log.info(f"staged work of {staged} failed, dead-lettered or canceled file(s) removed")
    api = settings.api()
    expired_uploads = 0
    if api.upload_bucket:
        expired_uploads = presigned.expire(postgres.db, S3Clients(s3)(api.upload_s3_endpoint))
        context.log.info(f"{expired_uploads} presigned upload(s) never completed: their objects removed")
    return report.expired_files + report.orphan_files + expired_uploads + staged


@dg.job(description="Remove raw bytes that nothing will process again (failed, dead-lettered, canceled, orphans).")
def raw_file_retention_job():
    remove_expired_raw_bytes()


raw_file_retention_schedule = dg.ScheduleDefinition(
    job=raw_file_retention_job, cron_schedule="40 * * * *", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly at :40: remove raw bytes past INGESTION_FAILED_TTL_DAYS and orphans past "
                "INGESTION_ORPHAN_TTL_HOURS.",
)

