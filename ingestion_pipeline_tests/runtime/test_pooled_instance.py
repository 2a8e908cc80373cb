"""The one place the project relies on Dagster beyond its documented API: ``runtime/pooled_instance.py`` asks the
instance's Postgres storages to keep pooled connections (``optimize_for_webserver``, as dagster-webserver does).

These tests fail on a Dagster upgrade that breaks it: by default every storage call opens and closes a
connection (a 1M-row metric run opened ~170, about 1.5 s of forks and logins); pooled, the calls share a few.
"""

import sys
import time

import dagster as dg
import psycopg

from ingestion_pipeline.runtime.pooled_instance import pooled_instance


def _storage_backends(dagster_pg_url: str) -> set[int]:
    """The server processes of clients connected to Dagster's database, this observer's own excepted.

    Only client backends: an autovacuum worker shows in pg_stat_activity with the database it is vacuuming, and
    one that started mid-test made a new "connection" appear that no client opened (seen in CI)."""
    with psycopg.connect(dagster_pg_url.replace("postgresql+psycopg2://", "postgresql://", 1)) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchall()
    return {pid for (pid,) in rows}


def _backends_after_closing(dagster_pg_url: str, seconds: float = 5.0) -> set[int]:
    """The backends still there once closed connections' server processes had time to exit: a process leaves
    pg_stat_activity shortly after its client disconnects, not at once (seen on a loaded machine)."""
    deadline = time.monotonic() + seconds
    while (left := _storage_backends(dagster_pg_url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _dagsters_own_instance() -> dg.DagsterInstance:
    """The project's instance as Dagster's own class builds it, without the project's ``instance_class``."""
    ref = dg.DagsterInstance.get().get_ref()
    return dg.DagsterInstance.from_ref(ref._replace(custom_instance_class_data=None))


def test_a_pooled_instance_serves_many_storage_calls_over_the_same_connections(project_dagster_home, dagster_pg_url):
    plain = _dagsters_own_instance()
    assert type(plain) is dg.DagsterInstance
    try:
        for _ in range(3):
            plain.get_runs_count()
            assert _backends_after_closing(dagster_pg_url) == set()  # opened and closed for each call
    finally:
        plain.dispose()

    instance = pooled_instance()
    try:
        instance.get_runs_count()
        held = _storage_backends(dagster_pg_url)
        assert held, "the pooled instance keeps no connection open: optimize_for_webserver no longer pools"
        for _ in range(20):
            instance.get_runs_count()
            instance.get_run_records(limit=1)
        assert _storage_backends(dagster_pg_url) <= held  # the same server processes, no new logins
    finally:
        instance.dispose()


def test_a_worker_keeps_one_pooled_instance_across_runs_of_the_same_instance(project_dagster_home, dagster_pg_url):
    """A warm run worker (runtime/run_worker.py) runs one run after another: the instance of the same ref is kept
    with its connections, so the event writes do not each fork and log in a server process."""
    from ingestion_pipeline.runtime.pooled_instance import PooledInstances

    ref = dg.DagsterInstance.get().get_ref()
    instances = PooledInstances()
    try:
        first = instances.of(ref)
        first.get_runs_count()
        held = _storage_backends(dagster_pg_url)
        assert held, "the run worker's instance keeps no connection open"
        for _ in range(20):  # the next runs of the same instance: the same instance, the same server processes
            assert instances.of(ref) is first
            first.get_runs_count()
            first.get_run_records(limit=1)
        assert _storage_backends(dagster_pg_url) <= held

        plain_ref = dg.DagsterInstance.get().get_ref()
        other = plain_ref._replace(settings={**plain_ref.settings, "code_servers": {"local_startup_timeout": 61}})
        assert instances.of(other) is not first  # another instance: a new one, the old one's connections closed
        del first
    finally:
        instances.close()
    assert _backends_after_closing(dagster_pg_url) == set()


def test_every_process_reading_the_project_instance_pools_and_closes_on_dispose(project_dagster_home,
                                                                                 dagster_pg_url):
    """``dagster_home/dagster.yaml`` names ``ProjectInstance``: the daemon, the code server and every other process
    that builds the instance from it pool its storages without being told; disposing it (a sensor tick's instance
    is disposed when the tick ends) closes what it held, where Dagster's own leaves it to the garbage collector."""
    from ingestion_pipeline.runtime.pooled_instance import ProjectInstance

    instance = dg.DagsterInstance.get()
    assert isinstance(instance, ProjectInstance)
    from_ref = dg.DagsterInstance.from_ref(instance.get_ref())  # how the daemon and a sensor tick build it
    assert isinstance(from_ref, ProjectInstance)
    from_ref.dispose()

    def calls() -> None:  # the run storage's and the event log's (each storage keeps its own connection)
        instance.get_runs_count()
        instance.get_run_records(limit=1)
        instance.get_latest_materialization_event(dg.AssetKey("raw_documents"))

    try:
        calls()
        held = _storage_backends(dagster_pg_url)
        assert len(held) >= 2
        for _ in range(20):
            calls()
        assert _storage_backends(dagster_pg_url) <= held
    finally:
        instance.dispose()
    assert _backends_after_closing(dagster_pg_url) == set()


def test_a_steps_output_is_kept_for_the_ui_by_dagsters_own_compute_log_manager(project_dagster_home, dagster_pg_url):
    """The project's instance keeps what a run's steps print (the UI's stdout/stderr) as Dagster does by default:
    its local compute log manager, under ``$DAGSTER_HOME/storage``, the output all there."""

    @dg.op
    def prints() -> None:
        print("a line on stdout", flush=True)
        print("a line on stderr", file=sys.stderr, flush=True)

    @dg.job
    def printing():
        prints()

    instance = pooled_instance()
    try:
        manager_class = type(instance.compute_log_manager)
        assert (manager_class.__module__.split(".")[0], manager_class.__name__) == ("dagster", "LocalComputeLogManager")
        assert instance.compute_log_manager._base_dir == str(project_dagster_home / "storage")  # noqa: SLF001
        result = printing.execute_in_process(instance=instance)
        assert result.success
        [capture] = [e for e in instance.all_logs(result.run_id) if e.dagster_event is not None
                     and e.dagster_event.event_type_value == "LOGS_CAPTURED"]
        log_key = instance.compute_log_manager.build_log_key_for_run(
            result.run_id, capture.dagster_event.event_specific_data.file_key)
        data = instance.compute_log_manager.get_log_data(log_key)
        assert b"a line on stdout" in data.stdout and b"a line on stderr" in data.stderr
        assert instance.compute_log_manager.is_capture_complete(log_key)
    finally:
        instance.dispose()


def test_the_instance_a_celery_step_opened_is_disposed_when_its_task_ends(project_dagster_home, dagster_pg_url):
    """dagster-celery's task builds the run's instance for its step and drops it undisposed; the worker disposes the
    instances a task opened when the task ends (cli/worker.py), and only those: the connections a dropped instance
    held close then, not at some later garbage collection."""
    from ingestion_pipeline.runtime.pooled_instance import dispose_instances_opened_since, open_instances

    kept = dg.DagsterInstance.get()  # open before the task: not the task's to dispose
    try:
        before = open_instances()
        step_instance = dg.DagsterInstance.from_ref(kept.get_ref())  # as dagster-celery's task builds it
        step_instance.get_runs_count()
        assert _storage_backends(dagster_pg_url)
        assert dispose_instances_opened_since(before) == 1
        assert dispose_instances_opened_since(before) == 0  # disposed once
        kept.get_runs_count()  # the instance open before still works
    finally:
        kept.dispose()
    del step_instance
    assert _backends_after_closing(dagster_pg_url) == set()
