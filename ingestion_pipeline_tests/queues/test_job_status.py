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
        file_ledger.mark_failed(conn, row["file_id"], "run-1", FailureInfo("db_unavailable", "gone", True),
                                ReliabilitySettings())
    redis_contract.sync_statuses(database, redis_queue)
    again = redis_contract.read_status(redis_queue, job.job_id)
    assert (again["status"], again["retry_count"], again["error_code"], again["error_type"]) == (
        "queued", "1", "ERR_DATABASE", "recoverable")  # the retry waits out its backoff

    with database.transaction() as conn:
        conn.execute("UPDATE ingestion_runs SET next_attempt_at = now() WHERE file_id = %s", (row["file_id"],))
        [row] = file_ledger.claim(conn, worker, batch.partition_key, replay_finished=False)
        file_ledger.mark_succeeded(conn, row["file_id"], "run-1", {"chunks": 3, "tokens": 40})
    assert redis_contract.sync_statuses(database, redis_queue) == {"done": 1}
    done = redis_contract.read_status(redis_queue, job.job_id)
    assert (done["status"], done["retry_count"], done["chunks_created"], done["tokens_used"]) == (
        "done", "1", "3", "40")
    assert float(done["duration_seconds"]) >= 0 and done["completed_at"] and done["error_code"] == ""

    assert (tmp_path / "kb" / "processed" / "a.md").is_file()
    assert redis_contract.sync_statuses(database, redis_queue) == {}  # reported once


def test_the_run_that_finishes_a_file_writes_done_or_failed_at_once(redis_queue, database, corpus_dir,
                                                                      tmp_path):
    """The status hash says done (or failed) as the run promotes (or fails) the file: no consumer round in
    between. The consumer's next round still settles the file and adds where it went, once."""
    import shutil

    import dagster as dg

    from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch

    root = tmp_path / "kb" / "incoming"
    root.mkdir(parents=True)
    (root / "good.md").write_text("# Good\n\nA note the run promotes.\n")
    shutil.copy(corpus_dir / "broken" / "password.pdf", root / "locked.pdf")
    good, locked = new_job("kb1", str(root / "good.md")), new_job("kb1", str(root / "locked.pdf"))
    for job in (good, locked):
        push(redis_queue, job)
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root.parent)
    RedisJobConsumer(redis_queue, database, LocalUploadStore(tmp_path / "store"), fingerprint="fp",
                     max_bytes=10**6).consume(10)
    [key] = batch_queued(database)
    with dg.instance_for_test() as instance:
        materialize_batch(instance, key, raise_on_error=False)  # the locked PDF fails its check

    done, failed = (redis_contract.read_status(redis_queue, j.job_id) for j in (good, locked))
    assert done["status"] == "done" and done["chunks_created"] != "0" and done["completed_at"]
    assert failed["status"] == "failed" and failed["error_code"] and failed["failed_at"]
    assert not done.get("moved_to") and (root / "good.md").is_file()  # settling is the consumer's
    assert redis_contract.sync_statuses(database, redis_queue) == {"done": 1, "failed": 1}
    assert redis_contract.read_status(redis_queue, good.job_id)["moved_to"].endswith("processed/good.md")
    assert redis_contract.sync_statuses(database, redis_queue) == {}
