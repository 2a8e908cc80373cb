"""upload_sensor: queued uploads become bounded batches, one dynamic partition and one run each."""


import dagster as dg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.partitions import BATCH_TAG, document_batches
from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource
from ingestion_pipeline.lib.batching import assign_queued_to_batches, partitions_with_queued_rows
from ingestion_pipeline.lib.db import connect


def batch_run_requests(
    instance: dg.DagsterInstance, postgres: PostgresResource, document_pipeline: DocumentPipelineResource
) -> tuple[list[str], list[str]]:
    """Assign queued rows to batches; return (partition keys with work, keys new to the instance).

    Shared by the sensor and `ingestion-pipeline process`, so both batch the same way.
    """
    url = postgres.url()
    with connect(url) as conn:
        assign_queued_to_batches(conn, document_pipeline.settings().batch)
        keys = partitions_with_queued_rows(conn)
    known = set(instance.get_dynamic_partitions(document_batches.name))
    return keys, [k for k in keys if k not in known]


@dg.sensor(
    job=document_batch_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Groups queued uploads into batches and launches one run per batch.",
)
def upload_sensor(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    document_pipeline: DocumentPipelineResource,
) -> dg.SensorResult:
    keys, new_keys = batch_run_requests(context.instance, postgres, document_pipeline)
    # run_key = partition key: a repeated tick (or a batch whose run is still queued) launches nothing twice.
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=k, partition_key=k, tags={BATCH_TAG: k}) for k in keys],
        dynamic_partitions_requests=[document_batches.build_add_request(new_keys)] if new_keys else [],
    )


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[upload_sensor])
