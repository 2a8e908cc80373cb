"""Dynamic partitions: a partition is a batch of files (documents), not one file (see DESIGN.md)."""

import dagster as dg

DOCUMENT_BATCHES = "document_batches"

document_batches = dg.DynamicPartitionsDefinition(name=DOCUMENT_BATCHES)

# Runs carrying the same value of these tags never run at once (dagster.yaml tag_concurrency_limits):
# one run per batch, and one run per S3 source (different sources run in parallel).
BATCH_TAG = "ingestion/batch"
SOURCE_TAG = "ingestion/source"


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions()
