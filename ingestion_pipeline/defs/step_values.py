"""Values between the steps of a fanned-out graph, in Postgres: a step on one worker host reads what a step on
another wrote (hosts share the database, not a disk: Dagster's default IO manager pickles to the local disk).

Only small JSON values go through it — the names of a big document's units; the documents themselves go through
the staging tables.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from ingestion_pipeline.core import step_values
from ingestion_pipeline.defs.resources import PostgresResource, postgres_resource

STEP_VALUES = "step_values"  # the IO manager's resource key


def _output(identifier: list[str]) -> step_values.StepOutput:
    run_id, step_key, name, *mapping = identifier
    return run_id, step_key, name, mapping[0] if mapping else ""


class PostgresStepValues(dg.ConfigurableIOManager):
    """JSON values keyed as Dagster names a step output (``OutputContext.get_identifier``: the run — its
    parent's for a step a re-execution skipped —, the step, the output and the mapping key)."""

    postgres: PostgresResource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        with self.postgres.db.connection() as conn:
            step_values.store(conn, _output(context.get_identifier()), obj)

    def load_input(self, context: dg.InputContext) -> Any:
        with self.postgres.db.connection() as conn:
            return step_values.load(conn, _output(context.upstream_output.get_identifier()))


def step_values_resource() -> PostgresStepValues:
    return PostgresStepValues(postgres=postgres_resource())


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(resources={STEP_VALUES: step_values_resource()})
