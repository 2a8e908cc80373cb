"""The code location: Dagster's own loader over ``defs/`` (each module there registers its objects with
``@dg.definitions``), merged with the executor every job, materialisation and backfill runs with.

Loading it only defines: no database, model or network is touched (`dg list defs` works in a plain shell).
A run or sensor tick then needs DATABASE_URL, or the embedded server allowed (``INGESTION_EMBEDDED_POSTGRES=1``;
the CLI's `dagster dev` inherits the CLI's URL): without either, its ``postgres`` resource fails with what to
set, rather than starting an embedded Postgres inside a deployed container.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import dagster as dg

from ingestion_pipeline.defs.partitions import DOCUMENT_JOB, METRIC_JOB
from ingestion_pipeline.runtime.executor import ingestion_executor


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        # What the UI launches on selected assets (a materialisation, a backfill) runs with the two jobs'
        # executor: in one process (the model loads once per run), or on Celery workers (INGESTION_EXECUTOR)
        dg.Definitions(executor=ingestion_executor),
    )


@functools.cache
def code_location() -> dg.Definitions:
    """The definitions, built once per process: `process` runs jobs from them and rebuilds the same jobs for
    ``dg.reconstructable`` below; building them again cost every `ingest` and `process` with work
    (docs/benchmarks.md, "What loading the code location costs")."""
    return defs()


# The two jobs as module-level functions, so that Dagster can rebuild them in another process
# (``dg.reconstructable``): `process` with INGESTION_EXECUTOR=celery runs them through ``dg.execute_job``, and each
# Celery worker rebuilds the job of the step it is given from this origin.
def document_batch_job() -> dg.JobDefinition:
    return code_location().resolve_job_def(DOCUMENT_JOB)


def metric_upload_job() -> dg.JobDefinition:
    return code_location().resolve_job_def(METRIC_JOB)


def reconstructable_jobs() -> dict[str, Any]:
    return {DOCUMENT_JOB: dg.reconstructable(document_batch_job), METRIC_JOB: dg.reconstructable(metric_upload_job)}
