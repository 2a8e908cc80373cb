"""Dynamic partitions: a partition is a batch of files (documents), not one file (ARCHITECTURE.md: a
batch is one partition and one run, so a bucket of a million objects does not become a million partitions)."""

import dagster as dg

DOCUMENT_BATCHES = "document_batches"

document_batches = dg.DynamicPartitionsDefinition(name=DOCUMENT_BATCHES)

# The jobs that materialise them (one run per partition).
DOCUMENT_JOB = "document_batch_job"
METRIC_JOB = "metric_upload_job"

# Metric uploads are large and few: one partition per upload.
METRIC_UPLOADS = "metric_uploads"
metric_uploads = dg.DynamicPartitionsDefinition(name=METRIC_UPLOADS)

# Runs carrying the same value of these tags never run at once (dagster.yaml tag_concurrency_limits):
# one run per batch, and one run per S3 source (different sources run in parallel).
BATCH_TAG = "ingestion/batch"
SOURCE_TAG = "ingestion/source"
WORKSPACE_TAG = "ingestion/workspace"  # at most 3 uploads of one workspace at once
TENANT_TAG = "ingestion/tenant"  # whose batch a run works on: filter the runs page by it
# Fair shares of the run slots (dagster.yaml tag_concurrency_limits, the run queue's priority): a small batch
# not from an S3 source is a person waiting (`interactive`, queued ahead); others are `bulk`, which take at most
# 3 of the 4 slots, 2 of them per tenant (BULK_TENANT_TAG, on bulk runs only), so a single upload always finds
# a free slot and one tenant's load leaves room for another's.
RUN_CLASS_TAG = "ingestion/run_class"
BULK_TENANT_TAG = "ingestion/bulk_tenant"
INTERACTIVE, BULK = "interactive", "bulk"
INTERACTIVE_PRIORITY = "10"  # dagster/priority: the queued run coordinator dequeues higher values first
# The launch generation a run was planned for (core/ledger.py: launch_gen); a failed run's finalisation
# only counts an attempt for rows it was launched for.
LAUNCH_GEN_TAG = "ingestion/launch_gen"
# Who launched a run outside the sensors (`process`); such runs never replay failed files.
LAUNCHED_BY_TAG = "ingestion/launched_by"
