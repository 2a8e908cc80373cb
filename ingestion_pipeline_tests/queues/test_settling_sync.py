"""The consumer's round settles a finished job's file from its rag's root as registered: a folder on the job's
path swapped for a link after the job was accepted, or a rag removed since, leaves the file where it is (the
job's status is still written, without ``moved_to``)."""

from __future__ import annotations

import dataclasses
import json

from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import accept_job, new_job
from ingestion_pipeline.queues.rag_registry import add_rag, remove_rag


def _failed_at_intake(database, tmp_path, source):
    """A job accepted and failed at once (its type is not its file's): final at the next round, no run needed."""
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("# A\n")
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=tmp_path / "rag")
    job = dataclasses.replace(new_job("kb1", str(source)), source_type="pdf")
    intake = accept_job(database, LocalUploadStore(tmp_path / "store"), job, fingerprint="fp", max_bytes=10**6)
    assert intake.job_status == "failed"
    return job


def test_a_finished_job_is_settled_under_its_root(redis_queue, database, tmp_path):
    job = _failed_at_intake(database, tmp_path, tmp_path / "rag" / "team" / "incoming" / "a.md")
    assert redis_contract.sync_statuses(database, redis_queue) == {"failed": 1}
    status = redis_contract.read_status(redis_queue, job.job_id)
    assert status["moved_to"] == str(tmp_path / "rag" / "team" / "failed" / "a.md")
    record = json.loads((tmp_path / "rag" / "team" / "failed" / "a.md.error.json").read_text())
    assert record["job_id"] == job.job_id and record["error_code"] == "ERR_UNSUPPORTED_TYPE"


def test_a_folder_swapped_for_a_link_after_acceptance_moves_nothing(redis_queue, database, tmp_path):
    job = _failed_at_intake(database, tmp_path, tmp_path / "rag" / "x" / "team" / "incoming" / "a.md")
    outside = tmp_path / "outside"
    (outside / "team" / "incoming").mkdir(parents=True)
    (outside / "team" / "incoming" / "a.md").write_text("someone else's\n")
    (tmp_path / "rag" / "x").rename(tmp_path / "rag" / "x.queued")
    (tmp_path / "rag" / "x").symlink_to(outside)  # above the folder that gets failed/
    assert redis_contract.sync_statuses(database, redis_queue) == {"failed": 1}
    status = redis_contract.read_status(redis_queue, job.job_id)
    assert status["status"] == "failed" and not status.get("moved_to")
    assert sorted(p.name for p in outside.rglob("*")) == ["a.md", "incoming", "team"]
    assert (outside / "team" / "incoming" / "a.md").read_text() == "someone else's\n"
    assert redis_contract.sync_statuses(database, redis_queue) == {}  # reported: not tried again


def test_the_file_of_a_removed_rag_stays(redis_queue, database, tmp_path):
    source = tmp_path / "rag" / "incoming" / "a.md"
    job = _failed_at_intake(database, tmp_path, source)
    with database.transaction() as conn:
        remove_rag(conn, "kb1")
    assert redis_contract.sync_statuses(database, redis_queue) == {"failed": 1}
    assert not redis_contract.read_status(redis_queue, job.job_id).get("moved_to") and source.is_file()
