"""The janitor's part in a run whose worker died (``runtime/janitor.py``): the run failed, its pool slots back."""

from __future__ import annotations

import uuid

import dagster as dg

from ingestion_pipeline.core.run_tags import DOCUMENT_JOB
from ingestion_pipeline.runtime import janitor


def test_a_run_whose_worker_died_is_failed_and_its_embedding_slot_freed(project_dagster_home, database, monkeypatch):
    """A document run SIGKILLed mid-embedding holds a slot of the `embedding` pool (its limit is the instance's,
    dagster.yaml); the janitor that fails the run gives the slot back at once, so the next run's embedding step
    does not wait for the daemon, and `process`, which has none, is never left short of one."""
    instance = dg.DagsterInstance.get()
    try:
        run_id = str(uuid.uuid4())
        instance.add_run(dg.DagsterRun(job_name=DOCUMENT_JOB, run_id=run_id, status=dg.DagsterRunStatus.STARTED))
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("embedding")
        assert storage.get_concurrency_info("embedding").slot_count == 4
        claim = storage.claim_concurrency_slot("embedding", run_id, "document_embeddings.plan_shares")
        assert claim.is_claimed
        monkeypatch.setattr(janitor, "STARTUP_GRACE_SECONDS", -3600.0)  # started (and silent) an hour ago

        assert janitor.fail_runs_with_dead_workers(instance, database, lease_seconds=60) == [run_id]

        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        assert storage.get_concurrency_info("embedding").claimed_slots == []
    finally:
        instance.dispose()
