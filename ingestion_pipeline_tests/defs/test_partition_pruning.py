"""Finished batches past retention leave Dagster's partition list; their runs stay, and a replay brings the
partition back."""

import dagster as dg
import pytest

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.ledger import DOCUMENT_FILES
from ingestion_pipeline.core.settings import ReliabilitySettings, load_settings
from ingestion_pipeline.defs.ledger.partition_pruning import partition_pruning_job, prune_finished_partitions
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.runtime.launching import plan_document_runs
from ingestion_pipeline_tests.helpers import batch_queued, ingest, table


def _age(db, partition_key: str, days: int) -> None:
    db.execute("UPDATE ingestion_runs SET finished_at = now() - make_interval(days => %s), "
               "updated_at = now() - make_interval(days => %s) WHERE partition_key = %s", (days, days, partition_key))


@pytest.mark.integration
def test_only_finished_batches_past_retention_are_pruned_and_a_replay_brings_one_back(database, db, tmp_path):
    for name in ("old", "recent", "waiting"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\nThe {name} note.")
    with dg.instance_for_test() as instance:
        [old] = ingest(instance, database, "acme", tmp_path / "old.md")
        [recent] = ingest(instance, database, "acme", tmp_path / "recent.md")
        [waiting] = ingest(instance, database, "acme", tmp_path / "waiting.md")
        _age(db, old, 40)
        db.execute("UPDATE ingestion_runs SET status = 'failed' WHERE partition_key = %s", (old,))  # finished, failed
        _age(db, recent, 3)
        _age(db, waiting, 40)
        db.execute("UPDATE ingestion_runs SET status = 'queued', finished_at = NULL WHERE partition_key = %s",
                   (waiting,))  # one of its files is still to do: the batch is not finished
        runs_of_old = instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": old}))
        assert runs_of_old

        pruned = prune_finished_partitions(instance, database, ReliabilitySettings(partition_retention_days=30))
        assert pruned == {"document_batches": 1, "metric_uploads": 0}
        assert set(instance.get_dynamic_partitions(document_batches.name)) == {recent, waiting}
        assert instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": old})) == runs_of_old  # history
        assert prune_finished_partitions(instance, database, ReliabilitySettings(partition_retention_days=30)) == {
            "document_batches": 0, "metric_uploads": 0}  # recorded: not looked at again

        # a person replays the pruned batch's file: the planner adds its partition again
        [row] = table(db, "SELECT file_id FROM ingestion_runs WHERE partition_key = %s", old)
        with database.transaction() as conn:
            ledger.requeue(conn, DOCUMENT_FILES, [row["file_id"]], actor="test")
        plan = plan_document_runs(instance, database, load_settings().batch)
        assert old in plan.new_partition_keys


def test_the_pruning_job_runs_from_dagster(database, db, tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_PARTITION_RETENTION_DAYS", "1")
    (tmp_path / "a.md").write_text("# A\n\nA note.")
    with dg.instance_for_test() as instance:
        [key] = ingest(instance, database, "acme", tmp_path / "a.md")
        _age(db, key, 2)
        result = partition_pruning_job.execute_in_process(instance=instance,
                                                          resources={"postgres": PostgresResource(),
                                                                     "settings": SettingsResource()})
        assert result.success and result.output_for_node("prune_partitions") == 1
        assert instance.get_dynamic_partitions(document_batches.name) == []
        assert batch_queued(database) == []
