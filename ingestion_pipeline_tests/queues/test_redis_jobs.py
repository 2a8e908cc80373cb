"""The Redis job contract end to end, through the real executable and a real redis-server: push, one
`process`, statuses written from the ledger, files moved, malformed messages dead-lettered with their reason."""

import json

import pytest

from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import table


def _status(redis, job_id: str) -> dict:
    return {k.decode(): v.decode() for k, v in redis.hgetall(redis_contract.status(job_id)).items()}


@pytest.mark.integration
def test_push_process_statuses_files_and_dead_letters(redis_queue, database, project_dagster_home, db, corpus_dir,
                                                      tmp_path):
    root = tmp_path / "kb"
    incoming = root / "incoming"
    incoming.mkdir(parents=True)
    (incoming / "note.md").write_text("# Note\n\nThe meeting moved to Thursday at noon.\n")
    (incoming / "locked.pdf").write_bytes((corpus_dir / "broken" / "password.pdf").read_bytes())
    (incoming / "sheet.csv").write_text("a,b\n1,2\n")
    outside = tmp_path / "elsewhere.md"
    outside.write_text("# Secret\n\nnot under the root\n")
    (incoming / "link.md").symlink_to(outside)

    added = json_lines(run_cli("queue", "rag", "add", "kb1", "--tenant", "acme", "--root", str(root), "--json").stdout)
    assert added == [{"rag_id": "kb1", "tenant_id": "acme", "root": str(root.resolve())}]

    pushed = json_lines(run_cli("queue", "push", str(incoming / "note.md"), str(incoming / "locked.pdf"),
                                "--rag", "kb1", "--json").stdout)
    note_job, locked_job = (p["job_id"] for p in pushed)
    assert _status(redis_queue, note_job)["status"] == "submitted"
    [high] = json_lines(run_cli("queue", "push", str(incoming / "sheet.csv"), "--rag", "kb1", "--priority", "high",
                                "--json").stdout)
    [link] = json_lines(run_cli("queue", "push", str(incoming / "link.md"), "--rag", "kb1", "--json").stdout)
    [unknown] = json_lines(run_cli("queue", "push", str(incoming / "note.md"), "--rag", "nokb", "--json").stdout)
    malformed = {
        b"{not json": "not JSON",
        json.dumps({"rag_id": "kb1"}).encode(): "missing field 'job_id'",
        json.dumps({"job_id": "job-1", "rag_id": "kb1"}).encode(): "bad job_id 'job-1'",
        json.dumps({"job_id": "rag-kb1-1764400000-0123abcd", "rag_id": "kb1", "source_path": "/x.md",
                    "source_type": "md", "filename": "x.md", "submitted_at": "2026-11-29T06:00:00.000Z",
                    "retry_count": "2"}).encode(): "field 'retry_count' must be a int",
        b"\xff\xfe not utf-8": "not JSON",
    }
    for raw in malformed:
        redis_queue.lpush(redis_contract.QUEUE, raw)

    result = run_cli("process")
    assert "redis queue: took 10 job(s)" in result.stderr

    done = _status(redis_queue, note_job)
    assert done["status"] == "done" and int(done["chunks_created"]) >= 1 and int(done["tokens_used"]) > 0
    assert done["completed_at"].endswith("Z") and float(done["duration_seconds"]) >= 0 and done["started_at"]
    assert 0 < redis_queue.ttl(redis_contract.status(note_job)) <= 7 * 24 * 3600
    assert (root / "processed" / "note.md").is_file() and not (incoming / "note.md").exists()

    failed = _status(redis_queue, locked_job)
    assert (failed["status"], failed["error_code"], failed["error_type"]) == (
        "failed", "ERR_PDF_ENCRYPTED", "non_recoverable")
    assert "pdf_password_protected" in failed["error"] and json.loads(failed["suggestions"])
    record = json.loads((root / "failed" / "locked.pdf.error.json").read_text())
    assert record["job_id"] == locked_job and record["error_code"] == "ERR_PDF_ENCRYPTED"

    unsupported = _status(redis_queue, high["job_id"])
    assert (unsupported["status"], unsupported["error_code"]) == ("failed", "ERR_UNSUPPORTED_TYPE")
    assert (root / "failed" / "sheet.csv").is_file() and (root / "failed" / "sheet.csv.error.json").is_file()

    # refused: dead-lettered with the reason, the file left where it is
    assert _status(redis_queue, link["job_id"])["error_code"] == "ERR_PATH_REFUSED"
    assert _status(redis_queue, unknown["job_id"])["error_code"] == "ERR_UNKNOWN_RAG"
    assert (incoming / "link.md").is_symlink()
    letters = json_lines(run_cli("queue", "dead-letter", "list", "--json").stdout)
    by_job = {d["job_id"]: d for d in letters if d["job_id"]}
    assert by_job[link["job_id"]]["error_code"] == "ERR_PATH_REFUSED"
    assert "really" in by_job[link["job_id"]]["reason"]
    assert by_job[unknown["job_id"]]["error_code"] == "ERR_UNKNOWN_RAG"
    reasons = sorted(d["reason"] for d in letters if d["error_code"] == "ERR_MALFORMED_MESSAGE")
    assert len(reasons) == len(malformed)
    for expected in malformed.values():
        assert any(expected in r for r in reasons), (expected, reasons)

    # every accepted job once in the ledger; nothing left on the queues or held
    jobs = table(db, "SELECT job_id, file_id, status FROM queue_jobs ORDER BY job_id")
    assert {j["job_id"]: j["status"] for j in jobs} == {note_job: "done", locked_job: "failed",
                                                        high["job_id"]: "failed"}
    assert len(table(db, "SELECT * FROM ingestion_runs")) == 2
    [state] = json_lines(run_cli("queue", "status", "--json").stdout)
    assert (state["normal"], state["high"], state["processing"], state["dead_letter"]) == (0, 0, 0, 7)

    # the rag registered afterwards: the unknown-rag job replays and is accepted; its content is already the
    # active version, so it is done at intake (no run) and its file moved beside the first one
    run_cli("queue", "rag", "add", "nokb", "--tenant", "acme", "--root", str(root))
    (incoming / "note.md").write_text((root / "processed" / "note.md").read_text())
    replayed = json_lines(run_cli("queue", "dead-letter", "replay", "--job", unknown["job_id"], "--json").stdout)
    assert [r["job_id"] for r in replayed] == [unknown["job_id"]]
    assert "nothing queued" in run_cli("process").stdout
    again = _status(redis_queue, unknown["job_id"])
    assert (again["status"], again["chunks_created"]) == ("done", "0")
    assert redis_queue.ttl(redis_contract.status(unknown["job_id"])) > 0
    assert (root / "processed" / f"note.{unknown['job_id']}.md").is_file()
