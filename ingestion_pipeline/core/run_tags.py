"""The names the project's Dagster runs carry: partitions, jobs and tags, as plain strings.

Dagster-free on purpose: `submit` and the API plan a fast-lane run (``documents/run_plan.py``) and ask the webserver
to launch it without importing Dagster (a large part of a one-file submit: benchmarks/dev_latency.py times submits).
``defs/partitions.py`` builds the partitions definitions from these names.
"""

DOCUMENT_BATCHES = "document_batches"  # a partition is a batch of files, not one file
METRIC_UPLOADS = "metric_uploads"  # metric uploads are large and few: one partition per upload

# The jobs that materialise them (one run per partition).
DOCUMENT_JOB = "document_batch_job"
METRIC_JOB = "metric_upload_job"

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
PRIORITY_TAG = "dagster/priority"
MAX_RETRIES_TAG = "dagster/max_retries"
# The launch generation a run was planned for (core/ledger.py: launch_gen); a failed run's finalisation
# only counts an attempt for rows it was launched for.
LAUNCH_GEN_TAG = "ingestion/launch_gen"
# Who launched a run outside the sensors (`process`, the fast lane); such runs never replay failed files.
LAUNCHED_BY_TAG = "ingestion/launched_by"
FAST_LANE = "fast_lane"
# Dagster's own tag for who launched a run: its UI shows it as the run's "Launched by" (a sensor's runs show
# the sensor). The fast lane and `process` name themselves in it rather than pass for a sensor or a person.
USER_TAG = "user"
# The run key as a tag of the run, whoever launched it. Dagster skips a run key a sensor launched before, for
# that sensor only; the sensors look this tag up to skip a batch's run the fast lane launched.
RUN_KEY_TAG = "ingestion/run_key"


def run_key(partition_key: str, launch_gen: int) -> str:
    """The partition key for a first launch; ``<key>:r<gen>`` for a relaunch (a retry, the janitor,
    a replay). A repeated tick computes the same key, so Dagster launches it once."""
    return partition_key if not launch_gen else f"{partition_key}:r{launch_gen}"
