"""Dynamic partitions: a partition is a batch of files (documents), not one file (see DESIGN.md)."""

import dagster as dg

DOCUMENT_BATCHES = "document_batches"

document_batches = dg.DynamicPartitionsDefinition(name=DOCUMENT_BATCHES)

# Runs carrying the same value of this tag never run at once (dagster.yaml tag_concurrency_limits).
BATCH_TAG = "ingestion/batch"


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions()
