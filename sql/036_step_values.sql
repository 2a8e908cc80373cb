-- The small values Dagster passes between the steps of a fanned-out graph (the names of a big document's units,
-- defs/step_values.py): kept in the database every worker host shares, so a step on one host reads what a step
-- on another wrote. Keyed as Dagster names a step's output (run, step, output, mapping key); a re-execution
-- reads its parent run's values. The janitor drops rows older than a week.
CREATE TABLE dagster_step_values (
    run_id      text NOT NULL,
    step_key    text NOT NULL,
    output_name text NOT NULL,
    mapping_key text NOT NULL DEFAULT '',
    value       jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_key, output_name, mapping_key)
);
CREATE INDEX dagster_step_values_created_at ON dagster_step_values (created_at);
