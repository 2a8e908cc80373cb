"""What a process that executes step after step keeps from one step to the next
(``runtime/kept_across_steps.py``, taken by ``defs/resources.py``)."""

import time

import dagster as dg
import psycopg
import pytest

from ingestion_pipeline.core.db import RECHECK_AFTER_SECONDS
from ingestion_pipeline.core.leases import LeaseKeeper, last_beats
from ingestion_pipeline.core.migrations import SchemaOutOfDate
from ingestion_pipeline.defs import resources
from ingestion_pipeline.runtime import kept_across_steps


def _step_backend(database_url: str) -> tuple[object, int]:
    """One step's PostgresResource, set up and torn down as Dagster does: its pool and the server process of the
    connection it queried with."""
    with dg.build_resources({"postgres": resources.PostgresResource(database_url=database_url)}) as built:
        db = built.postgres.db
        with db.connection() as conn:
            pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
    return db, pid


def test_a_process_that_executes_step_after_step_keeps_its_database_pool(database_url, monkeypatch):
    first, first_pid = _step_backend(database_url)
    second, second_pid = _step_backend(database_url)
    assert first is not second and first_pid != second_pid  # by default each step has its own pool and logs in

    monkeypatch.setattr(kept_across_steps, "_keep", True)
    kept_across_steps.database.cache_clear()
    try:
        kept, _ = _step_backend(database_url)
        again, _ = _step_backend(database_url)
        assert again is kept and not kept._pool.closed  # the step after: the same pool, left open between them
        with psycopg.connect(database_url, autocommit=True) as conn:  # a schema this code cannot use
            conn.execute("DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)")
        with pytest.raises(dg.DagsterResourceFunctionError) as refused:
            _step_backend(database_url)
        assert isinstance(refused.value.__cause__, SchemaOutOfDate)  # still checked by every step
        assert "ingestion-pipeline db migrate" in str(refused.value.__cause__)
    finally:
        kept_across_steps.database(database_url, 4).close()
        kept_across_steps.database.cache_clear()


def test_a_kept_heartbeat_connection_beats_for_each_step_and_stays_open(database_url):
    """The heartbeat's connection of such a process serves one step's keeper after another: each beats at its start
    and clears its run's beat at its end, and the connection is left open for the next."""
    kept = kept_across_steps.lease_database(database_url)
    try:
        pids = []
        for run_id in ("run-a", "run-b"):
            with (LeaseKeeper(database_url, dagster_run_id=run_id, owner=run_id, lease_seconds=900, db=kept),
                  kept.connection() as conn):
                pids.append(conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"])
                assert last_beats(conn, [run_id]).keys() == {run_id}
            with kept.connection() as conn:
                assert last_beats(conn, [run_id]) == {}  # cleared when the step ended
        assert pids[0] == pids[1]  # one session for both steps
    finally:
        kept.close()
        kept_across_steps.lease_database.cache_clear()


def test_a_kept_pool_whose_sessions_the_server_ended_serves_the_next_step(database_url, monkeypatch):
    """Between two steps the server ends every session of the kept pools (what a restart does to them): the next
    step gets working connections from the same pools, its heartbeat included."""
    monkeypatch.setattr(kept_across_steps, "_keep", True)
    kept_across_steps.database.cache_clear()
    kept_across_steps.lease_database.cache_clear()
    try:
        kept, first_pid = _step_backend(database_url)
        beats = kept_across_steps.lease_database(database_url)
        with beats.connection() as conn:
            conn.execute("SELECT 1")
        with psycopg.connect(database_url, autocommit=True) as conn:
            ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                                 "AND backend_type = 'client backend'").fetchone()[0]
        assert ended >= 2
        time.sleep(RECHECK_AFTER_SECONDS + 0.1)  # a restart takes longer than the pool trusts a returned connection
        again, pid = _step_backend(database_url)
        assert again is kept and pid != first_pid
        with LeaseKeeper(database_url, dagster_run_id="run-c", owner="run-c", lease_seconds=900, db=beats), \
                kept.connection() as conn:
            assert last_beats(conn, ["run-c"]).keys() == {"run-c"}
    finally:
        kept_across_steps.database(database_url, 4).close()
        kept_across_steps.lease_database(database_url).close()
        kept_across_steps.database.cache_clear()
        kept_across_steps.lease_database.cache_clear()
