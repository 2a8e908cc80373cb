"""Recoverable errors at intake: a database that does not answer (nothing listens on its port) puts the job
back with retry_count + 1 after the backoff; past max_retries it fails, dead-lettered with why."""

import json
import time

import pytest

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.redis_server import free_port
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import push
from ingestion_pipeline_tests.helpers import table


@pytest.mark.integration
def test_database_down_retries_with_backoff_then_fails(redis_queue, database, db, tmp_path):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    (root / "b.md").write_text("# B\n\nbeta\n")
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root)
    patient, impatient = new_job("kb1", str(root / "a.md")), new_job("kb1", str(root / "b.md"), max_retries=1)
    push(redis_queue, patient)
    push(redis_queue, impatient)
    store = LocalUploadStore(tmp_path / "store")

    def consumer(db: Database) -> RedisJobConsumer:
        return RedisJobConsumer(redis_queue, db, store, fingerprint="fp", max_bytes=10**6, backoff=(4.0, 4.0, 4.0))

    with Database(f"postgresql://nobody@127.0.0.1:{free_port()}/none?connect_timeout=1", timeout=1) as down:
        assert consumer(down).consume(10).outcomes == {"retrying": 2}
        assert redis_queue.zcard(redis_contract.DELAYED) == 2 and redis_queue.llen(redis_contract.QUEUE) == 0
        waiting = redis_contract.read_status(redis_queue, patient.job_id)
        assert (waiting["status"], waiting["retry_count"], waiting["error_code"], waiting["error_type"]) == (
            "submitted", "1", "ERR_DATABASE", "recoverable")
        assert consumer(down).consume(10).outcomes == {}  # the backoff has not ended: nothing taken
        time.sleep(4.2)
        assert consumer(down).consume(10).outcomes == {"retrying": 1, "failed": 1}

    failed = redis_contract.read_status(redis_queue, impatient.job_id)
    assert (failed["status"], failed["error_code"], failed["error_type"]) == (
        "failed", "ERR_DATABASE", "non_recoverable")
    assert "(after 1 retries)" in failed["error"] and redis_queue.ttl(redis_contract.status(impatient.job_id)) > 0
    [letter] = redis_contract.list_dead_letters(redis_queue)
    assert letter["job_id"] == impatient.job_id and json.loads(letter["message"])["retry_count"] == 1

    time.sleep(4.2)  # the database is back, the backoff over
    assert consumer(database).consume(10).outcomes == {"accepted": 1}
    [row] = table(db, "SELECT job_id, status FROM queue_jobs")
    assert row == {"job_id": patient.job_id, "status": "queued"}
    assert redis_contract.read_status(redis_queue, patient.job_id)["retry_count"] == "2"
