"""The code location: Dagster's own loader over ``defs/`` (each module there registers its objects with
``@dg.definitions``), merged with the executor every job, materialisation and backfill runs with.

Loading it needs DATABASE_URL, except for Dagster's validation commands and where the embedded server is
allowed (``INGESTION_EMBEDDED_POSTGRES=1``; the CLI's `dagster dev` inherits the CLI's URL).
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from ingestion_pipeline.core.db import NO_DATABASE_MESSAGE, embedded_allowed


def _require_a_database() -> None:
    """A deployed code server or daemon with no DATABASE_URL fails here, at load, rather than starting an
    embedded Postgres of its own in its container (Dagster's validation commands need no database)."""
    if os.environ.get("DATABASE_URL") or embedded_allowed() or os.environ.get("DAGSTER_IS_DEFS_VALIDATION_CLI"):
        return
    raise dg.DagsterInvariantViolationError(NO_DATABASE_MESSAGE)


@dg.definitions
def defs() -> dg.Definitions:
    _require_a_database()
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        # What the UI launches on selected assets (a materialisation, a backfill) runs every step in one
        # process too, as the two jobs do: the model loads once per run, not once per step.
        dg.Definitions(executor=dg.in_process_executor),
    )
