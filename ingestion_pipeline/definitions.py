"""The code location: Dagster's own loader over ``defs/`` (each module there registers its objects with
``@dg.definitions``), merged with the executor every job, materialisation and backfill runs with."""

from __future__ import annotations

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent),
        # What the UI launches on selected assets (a materialisation, a backfill) runs every step in one
        # process too, as the two jobs do: the model loads once per run, not once per step.
        dg.Definitions(executor=dg.in_process_executor),
    )
