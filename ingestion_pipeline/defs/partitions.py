"""Dynamic partitions: a partition is a batch of files (documents), not one file (ARCHITECTURE.md: a
batch is one partition and one run, so a bucket of a million objects does not become a million partitions).

The names and the runs' tags are plain strings in ``core/run_tags.py`` (used without Dagster by the fast
lane); they are re-exported here for the code location."""

import dagster as dg

from ingestion_pipeline.core.run_tags import (  # noqa: F401 - re-exported
    BATCH_TAG,
    BULK,
    BULK_TENANT_TAG,
    DOCUMENT_BATCHES,
    DOCUMENT_JOB,
    INTERACTIVE,
    INTERACTIVE_PRIORITY,
    LAUNCH_GEN_TAG,
    LAUNCHED_BY_TAG,
    METRIC_JOB,
    METRIC_UPLOADS,
    RUN_CLASS_TAG,
    SOURCE_TAG,
    TENANT_TAG,
    WORKSPACE_TAG,
)

document_batches = dg.DynamicPartitionsDefinition(name=DOCUMENT_BATCHES)
metric_uploads = dg.DynamicPartitionsDefinition(name=METRIC_UPLOADS)
