"""A job's status hash follows its file through the ledger's own transitions: queued, processing while a run
holds it (with started_at), queued again with its retry count after a transient failure, then done."""

from ingestion_pipeline.core.failures import FailureInfo
from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.core.settings import BatchSettings, ReliabilitySettings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.documents.batching import assign_queued_to_batches
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import push


def test_the_status_follows_the_ledger(redis_queue, database, tmp_path):
    root = tmp_path / "kb" / "incoming"
    root.mkdir(parents=True)
    (root / "a.md").write_text("# A\n\nalpha\n")
    job = new_job("kb1", str(root / "a.md"))
    push(redis_queue, job)
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root.parent)
    RedisJobConsumer(redis_queue, database, LocalUploadStore(tmp_path / "store"), fingerprint="fp",
                     max_bytes=10**6).consume(10)
    assert redis_contract.read_status(redis_queue, job.job_id)["status"] == "queued"

    worker = Worker(owner="run-1", dagster_run_id="run-1", lease_seconds=60)
    with database.transaction() as conn:
        [batch] = assign_queued_to_batches(conn, BatchSettings())
        [row] = file_ledger.claim(conn, worker, batch.partition_key, replay_finished=False)
    redis_contract.sync_statuses(database, redis_queue)
    running = redis_contract.read_status(redis_queue, job.job_id)
    assert running["status"] == "processing" and running["started_at"].endswith("Z")

    with database.transaction() as conn:
        file_ledger.mark_failed(conn, row["run_id"], "run-1", FailureInfo("db_unavailable", "gone", True),
                                ReliabilitySettings())
    redis_contract.sync_statuses(database, redis_queue)
    again = redis_contract.read_status(redis_queue, job.job_id)
    assert (again["status"], again["retry_count"], again["error_code"], again["error_type"]) == (
        "queued", "1", "ERR_DATABASE", "recoverable")  # the retry waits out its backoff

    with database.transaction() as conn:
        conn.execute("UPDATE ingestion_runs SET next_attempt_at = now() WHERE run_id = %s", (row["run_id"],))
        [row] = file_ledger.claim(conn, worker, batch.partition_key, replay_finished=False)
        file_ledger.mark_succeeded(conn, row["run_id"], "run-1", {"chunks": 3, "tokens": 40})
    assert redis_contract.sync_statuses(database, redis_queue) == {"done": 1}
    done = redis_contract.read_status(redis_queue, job.job_id)
    assert (done["status"], done["retry_count"], done["chunks_created"], done["tokens_used"]) == (
        "done", "1", "3", "40")
    assert float(done["duration_seconds"]) >= 0 and done["completed_at"] and done["error_code"] == ""

    assert (tmp_path / "kb" / "processed" / "a.md").is_file()
    assert redis_contract.sync_statuses(database, redis_queue) == {}  # reported once
