"""Small JSON values between the steps of a run, in the database every worker host shares
(``dagster_step_values``; the IO manager is ``defs/step_values.py``)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

# (run id, step key, output name, mapping key or "")
StepOutput = tuple[str, str, str, str]


def store(conn: psycopg.Connection, output: StepOutput, value: Any) -> None:
    conn.execute(
        """INSERT INTO dagster_step_values (run_id, step_key, output_name, mapping_key, value)
           VALUES (%s, %s, %s, %s, %s)
           ON CONFLICT (run_id, step_key, output_name, mapping_key) DO UPDATE SET value = EXCLUDED.value""",
        (*output, Jsonb(value)))


def load(conn: psycopg.Connection, output: StepOutput) -> Any:
    """The stored value; ``KeyError`` naming the output when there is none."""
    row = conn.execute(
        """SELECT value FROM dagster_step_values
            WHERE run_id = %s AND step_key = %s AND output_name = %s AND mapping_key = %s""", output).fetchone()
    if row is None:
        raise KeyError(f"no value stored for step output {'/'.join(part for part in output if part)}")
    return row["value"]


def drop_older_than(conn: psycopg.Connection, days: int = 7) -> int:
    """Values of runs older than ``days``: the janitor's. A re-execution from failure of such a run fails at its
    first step that reads one (the step names the missing value); re-executing all its steps works."""
    return conn.execute("DELETE FROM dagster_step_values WHERE created_at < now() - make_interval(days => %s)",
                        (days,)).rowcount
